'use strict'
// Code contexts: create (language, cwd), list, isolation, restart, remove.

const { Sandbox } = require('@e2b/code-interpreter')
const { attempt, run } = require('./_common')
const { contextDict, executionDict } = require('./_code')

async function scenario() {
  const out = {}
  const sbx = await Sandbox.create()
  try {
    const runCode = async (code, opts) => executionDict(await sbx.runCode(code, opts))
    await sbx.runCode("shared = 'default'")
    const ctx = await sbx.createCodeContext({ cwd: '/tmp' })
    out.created = contextDict(ctx)
    out.listed = (await sbx.listCodeContexts()).map(contextDict)
    out.isolated = await runCode('shared', { context: ctx })
    out.ctx_cwd = await runCode('import os\nos.getcwd()', { context: ctx })
    await sbx.runCode('mine = 1', { context: ctx })
    out.ctx_state = await runCode('mine + 1', { context: ctx })
    await sbx.restartCodeContext(ctx)
    out.restarted = await runCode('mine', { context: ctx })
    out.default_kept = await runCode('shared')

    const js = await sbx.createCodeContext({ language: 'javascript' })
    out.js_created = contextDict(js)
    out.js_run = await runCode('let k = 3; k * 3', { context: js })

    await sbx.removeCodeContext(ctx)
    out.after_remove = (await sbx.listCodeContexts()).map((c) => c.id)
    out.run_removed = await attempt(() => sbx.runCode('1', { context: ctx }))
    out.both = await attempt(() => sbx.runCode('1', { context: js, language: 'python' }))
  } finally {
    out.cleanup = await attempt(() => sbx.kill())
  }
  return out
}

run(scenario)
