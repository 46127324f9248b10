'use strict'
// runCode: state, executionCount, languages, errors, envs, streaming callbacks, rich results.

const { Sandbox } = require('@e2b/code-interpreter')
const { attempt, run } = require('./_common')
const { errorDict, executionDict, resultDict } = require('./_code')

const RICH = `
from IPython.display import display, HTML
class Everything:
    def _repr_html_(self): return "<b>html</b>"
    def _repr_markdown_(self): return "**md**"
    def _repr_svg_(self): return "<svg xmlns='http://www.w3.org/2000/svg'/>"
    def _repr_png_(self): return b"\\x89PNG fake"
    def _repr_jpeg_(self): return b"\\xff\\xd8 fake"
    def _repr_pdf_(self): return b"%PDF fake"
    def _repr_latex_(self): return r"$\\alpha$"
    def _repr_json_(self): return {"answer": 42}
    def _repr_javascript_(self): return "console.log(1)"
    def __repr__(self): return "Everything()"
display(HTML("<i>shown</i>"))
Everything()
`

const PLOT = `
import matplotlib.pyplot as plt
plt.plot([1, 2, 3], [4, 1, 9])
plt.title("trend")
plt.show()
`

const LEAN_START = `
import sys
started = (
    sys.argv[-1].rsplit("/", 1)[-1].startswith("kernel-sandgate-"),
    "jedi" in sys.modules,
    "prompt_toolkit" in sys.modules,
)
import jedi, IPython.terminal.embed, IPython
str(started + (callable(IPython.embed), "prompt_toolkit" in sys.modules))
`

async function scenario() {
  const out = {}
  const sbx = await Sandbox.create({ envs: { SANDBOX_LEVEL: 'sandbox' } })
  try {
    const runCode = async (code, opts) => executionDict(await sbx.runCode(code, opts))
    out.first = await runCode('x = 41\nx + 1')
    out.state = await runCode('x += 1\nprint(x)\nx')
    out.error = await runCode('1 / 0')
    out.after_error = await runCode('x')
    out.envs = await runCode(
      "import os\nos.environ['CELL_ONLY'] + ' ' + os.environ['SANDBOX_LEVEL']",
      { envs: { CELL_ONLY: 'cell' } },
    )
    out.envs_gone = await runCode("os.environ.get('CELL_ONLY', 'unset')")
    out.cwd = await runCode('import os\nos.getcwd()')
    out.debugpy = await runCode('import debugpy\nbool(debugpy.__version__)')
    out.lean_start = await runCode(LEAN_START)

    const events = []
    const started = performance.now()
    const record = (kind) => (item) => {
      const entry = { kind, t: (performance.now() - started) / 1000 }
      if (kind === 'stdout' || kind === 'stderr') {
        entry.line = item.line
        entry.timestamp = item.timestamp
        entry.error = item.error
      } else if (kind === 'result') {
        entry.result = resultDict(item)
      } else {
        entry.error = errorDict(item)
      }
      events.push(entry)
    }
    const streamed = await sbx.runCode(
      "import sys, time\nprint('one', flush=True)\ntime.sleep(1.5)\n" +
        "print('warn', file=sys.stderr, flush=True)\n7 * 6",
      {
        onStdout: record('stdout'),
        onStderr: record('stderr'),
        onResult: record('result'),
        onError: record('error'),
      },
    )
    out.stream = {
      execution: executionDict(streamed),
      events,
      end: (performance.now() - started) / 1000,
    }
    const errors = []
    await sbx.runCode("raise ValueError('bad value')", { onError: (e) => errors.push(errorDict(e)) })
    out.on_error = errors

    out.rich = await runCode(RICH)
    out.plot = await runCode(PLOT)
    out.dataframe = await runCode("import pandas as pd\npd.DataFrame({'a': [1, 2], 'b': [3, 4]})")
    out.imports = await runCode('import numpy, pandas, matplotlib, openpyxl\nnumpy.arange(3).sum()')

    out.js = await runCode('const y = 20; y + 1', { language: 'javascript' })
    out.js_state = await runCode("console.log('js out'); y * 2", { language: 'js' })
    out.js_env = await runCode("Deno.env.get('JS_ENV')", {
      language: 'javascript',
      envs: { JS_ENV: 'on' },
    })
    out.js_error = await runCode("throw new Error('js boom')", { language: 'javascript' })
    out.ts = await runCode('const n: number = 2; n ** 10', { language: 'typescript' })
    out.bash = await runCode('Z=5; echo hello $((Z * 2)) $BASH_ENV_VAR', {
      language: 'bash',
      envs: { BASH_ENV_VAR: 'env' },
    })
    out.bash_state = await runCode('echo z=$Z', { language: 'bash' })
    out.python_unaffected = await runCode('x')
  } finally {
    out.cleanup = await attempt(() => sbx.kill())
  }
  return out
}

run(scenario)
