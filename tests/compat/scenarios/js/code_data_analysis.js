'use strict'
// The seed pattern of examples/data-analysis with the JS SDK: upload data and the example's
// analysis script, run one fixed cell, read the JSON summary and the chart back, kill.
// Argument: the example's directory.

const fs = require('node:fs')
const path = require('node:path')
const { Sandbox } = require('@e2b/code-interpreter')
const { listAll, run } = require('./_common')

const JOB_DIR = '/home/user/job'
const ENTRY_POINT = `import runpy\nrunpy.run_path('${JOB_DIR}/analysis.py', run_name='__main__')`
const SALES_CSV = `region,product,amount
north,widget,120.5
south,widget,80
north,gadget,42
east,gadget,310.25
south,gizmo,99.75
east,widget,15
`

async function scenario(args) {
  const sbx = await Sandbox.create({ timeoutMs: 300000 })
  let summary
  let chart
  let stdout
  try {
    await sbx.files.write(`${JOB_DIR}/sales.csv`, SALES_CSV)
    await sbx.files.write(
      `${JOB_DIR}/analysis.py`,
      fs.readFileSync(path.join(args[0], 'analysis.py'), 'utf8'),
    )
    const execution = await sbx.runCode(ENTRY_POINT, { timeoutMs: 120000 })
    if (execution.error) throw new Error(`analysis failed: ${JSON.stringify(execution.error)}`)
    stdout = execution.logs.stdout.join('')
    summary = JSON.parse(await sbx.files.read(`${JOB_DIR}/out/summary.json`))
    chart = Buffer.from(await sbx.files.read(`${JOB_DIR}/out/chart.png`, { format: 'bytes' }))
  } finally {
    await sbx.kill()
  }
  const stillListed = (await listAll(Sandbox)).filter((s) => s.sandboxId === sbx.sandboxId)
  return {
    summary,
    chart_magic: chart.subarray(0, 8).toString('hex'),
    chart_bytes: chart.length,
    stdout,
    still_listed: stillListed.map((s) => s.sandboxId),
  }
}

run(scenario)
