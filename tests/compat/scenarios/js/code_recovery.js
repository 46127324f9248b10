'use strict'
// The interpreter heals: a killed kernel, a killed server; a killed sandbox ends runCode.

const { Sandbox } = require('@e2b/code-interpreter')
const { attempt, commandResult, describeError, now, run } = require('./_common')
const { executionDict } = require('./_code')

const KILL_SERVER = "pkill -KILL -f 'm sandgate[.]interpreter$'"

async function scenario() {
  const out = {}
  const sbx = await Sandbox.create()
  try {
    const runCode = async (code, opts) => executionDict(await sbx.runCode(code, opts))
    await sbx.runCode('kept = 1')
    const ctx = await sbx.createCodeContext({ cwd: '/tmp' })
    await sbx.runCode('mine = 2', { context: ctx })

    const kernelPid = Number((await sbx.runCode('import os\nos.getpid()')).text)
    out.kill_kernel = commandResult(await sbx.commands.run(`kill -9 ${kernelPid}`))
    out.after_kernel_kill = await runCode("'kept' in globals(), 1 + 1")
    out.ctx_untouched = await runCode('mine', { context: ctx })

    out.kill_server = commandResult(await sbx.commands.run(KILL_SERVER))
    let started = now()
    out.after_server_kill = await runCode('1 + 1')
    out.after_server_kill_s = now() - started
    out.ctx_after_server_kill = await runCode("import os\n'mine' in globals(), os.getcwd()", {
      context: ctx,
    })
    out.listed_after = (await sbx.listCodeContexts()).map((c) => c.id)
    out.ctx_id = ctx.id

    let signalRunning
    const running = new Promise((resolve) => {
      signalRunning = resolve
    })
    const longCell = attempt(() =>
      sbx.runCode("import time\nprint('running', flush=True)\ntime.sleep(60)", {
        onStdout: () => signalRunning(true),
        timeoutMs: 120_000,
      }),
    )
    out.cell_running = await Promise.race([
      running,
      new Promise((resolve) => setTimeout(() => resolve(false), 60_000).unref()),
    ])
    const killedAt = now()
    out.kill = await attempt(() => Sandbox.kill(sbx.sandboxId))
    const outcome = await longCell
    out.killed_mid_cell = { ok: outcome.ok, error: outcome.error || null, elapsed: now() - killedAt }
  } catch (err) {
    out.unexpected = describeError(err)
    throw err
  } finally {
    out.cleanup = await attempt(() => sbx.kill())
  }
  return out
}

run(scenario)
