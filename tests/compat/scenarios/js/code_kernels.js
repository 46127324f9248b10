'use strict'
// R and Java kernels: state, envs, cwd, errors, contexts; a context run as another user.

const { Sandbox } = require('@e2b/code-interpreter')
const { attempt, describeError, run } = require('./_common')
const { contextDict, executionDict } = require('./_code')

function shellQuote(text) {
  return `'${text.replace(/'/g, "'\\''")}'`
}

// POST /contexts from inside the sandbox, with fields the SDK does not send (`user`).
async function postContext(sbx, body) {
  const command =
    "curl -s -o /tmp/ctx.json -w '%{http_code}' -X POST http://127.0.0.1:49999/contexts " +
    `-H 'Content-Type: application/json' -d ${shellQuote(JSON.stringify(body))}; ` +
    'echo; cat /tmp/ctx.json'
  const stdout = (await sbx.commands.run(command)).stdout
  const newline = stdout.indexOf('\n')
  return { status: Number(stdout.slice(0, newline)), body: stdout.slice(newline + 1) }
}

async function scenario() {
  const out = {}
  const sbx = await Sandbox.create({ envs: { SANDBOX_LEVEL: 'sandbox' } })
  try {
    const runCode = async (code, opts) => executionDict(await sbx.runCode(code, opts))
    out.r_first = await runCode('x <- 41; x + 1', { language: 'r' })
    out.r_state = await runCode("x <- x + 1; cat('x is', x, '\\n'); x", { language: 'R' })
    out.r_env = await runCode(
      "paste(Sys.getenv('CELL_ONLY'), Sys.getenv('SANDBOX_LEVEL'), " +
        "system('echo $CELL_ONLY', intern = TRUE))",
      { language: 'r', envs: { CELL_ONLY: 'cell' } },
    )
    out.r_env_gone = await runCode("Sys.getenv('CELL_ONLY', 'unset')", { language: 'r' })
    out.r_cwd = await runCode('getwd()', { language: 'r' })
    out.r_error = await runCode("stop('r boom')", { language: 'r' })

    out.java_first = await runCode('int x = 40; x + 2', { language: 'java' })
    out.java_state = await runCode('System.out.println("x is " + x); x * 2', { language: 'java' })
    out.java_env = await runCode(
      'System.getenv("CELL_ONLY") + " " + System.getenv("SANDBOX_LEVEL") + " " + ' +
        'System.getProperty("CELL_ONLY")',
      { language: 'java', envs: { CELL_ONLY: 'cell' } },
    )
    out.java_env_gone = await runCode('String.valueOf(System.getenv("CELL_ONLY"))', {
      language: 'java',
    })
    out.java_cwd = await runCode('System.getProperty("user.dir")', { language: 'java' })
    out.java_error = await runCode('throw new IllegalStateException("java boom")', {
      language: 'java',
    })

    // A sandbox has 512 MiB: R and Java kernels take about 120 MiB each, so the default
    // ones go before contexts of their own start.
    for (const context of await sbx.listCodeContexts()) {
      if (context.language === 'r' || context.language === 'java') {
        await sbx.removeCodeContext(context)
      }
    }
    const rCtx = await sbx.createCodeContext({ language: 'r', cwd: '/tmp' })
    out.r_ctx = contextDict(rCtx)
    out.r_ctx_cwd = await runCode('getwd()', { context: rCtx })
    out.r_ctx_isolated = await runCode("exists('x')", { context: rCtx })
    await sbx.removeCodeContext(rCtx)
    const javaCtx = await sbx.createCodeContext({ language: 'java', cwd: '/tmp/java-work' })
    out.java_ctx = contextDict(javaCtx)
    out.java_ctx_cwd = await runCode(
      'System.getProperty("user.dir") + " " + new java.io.File("x.txt").getAbsolutePath()',
      { context: javaCtx },
    )
    out.listed = (await sbx.listCodeContexts()).map(contextDict)

    const asRoot = await postContext(sbx, { language: 'python', user: 'root', cwd: '/root' })
    out.root_ctx = asRoot
    if (asRoot.status === 200) {
      const rootCtx = JSON.parse(asRoot.body)
      out.root_run = await runCode('import os\nos.getuid(), os.getcwd()', { context: rootCtx })
    }
    out.user_ctx_run = await runCode('import os\nos.getuid()')
    out.unknown_user = await postContext(sbx, { language: 'python', user: 'nobody-here' })
  } catch (err) {
    out.unexpected = describeError(err)
    throw err
  } finally {
    out.cleanup = await attempt(() => sbx.kill())
  }
  return out
}

run(scenario)
