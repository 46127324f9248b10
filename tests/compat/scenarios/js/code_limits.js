'use strict'
// Per-call timeout and disconnect interrupt the cell; crashes restart; output is bounded.

const { Sandbox } = require('@e2b/code-interpreter')
const { attempt, describeError, run } = require('./_common')
const { executionDict } = require('./_code')

async function scenario() {
  const out = {}
  const sbx = await Sandbox.create()
  try {
    await sbx.runCode("kept = 'state'")
    let started = performance.now()
    try {
      await sbx.runCode('import time\ntime.sleep(60)', { timeoutMs: 3000 })
      out.timeout = { ok: true }
    } catch (err) {
      out.timeout = { ok: false, error: describeError(err) }
    }
    out.timeout_elapsed = (performance.now() - started) / 1000
    started = performance.now()
    out.after_timeout = executionDict(await sbx.runCode('kept'))
    out.after_timeout_elapsed = (performance.now() - started) / 1000

    out.crash = executionDict(await sbx.runCode('import os\nos._exit(3)'))
    out.after_crash = executionDict(await sbx.runCode("'kept' in globals(), 1 + 1"))

    await sbx.runCode("kept = 'again'")
    started = performance.now()
    const flood = await sbx.runCode(
      "import sys\nchunk = 'x' * (1 << 20)\nwhile True:\n    sys.stdout.write(chunk)",
      { timeoutMs: 120000 },
    )
    out.flood_elapsed = (performance.now() - started) / 1000
    out.flood = {
      stdout_bytes: flood.logs.stdout.reduce((n, s) => n + s.length, 0),
      stderr: [...flood.logs.stderr],
      error: flood.error ? { name: flood.error.name, value: flood.error.value } : null,
    }
    out.after_flood = executionDict(await sbx.runCode('kept'))
  } finally {
    out.cleanup = await attempt(() => sbx.kill())
  }
  return out
}

run(scenario)
