"""run_code: state, execution_count, languages, errors, envs, streaming callbacks, rich results."""

from __future__ import annotations

import time
from typing import Any

from _code import error_dict, execution_dict, result_dict
from _common import attempt, run
from e2b_code_interpreter import Sandbox

RICH = """
from IPython.display import display, HTML, Markdown, SVG, Latex, JSON, Javascript
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
"""

PLOT = """
import matplotlib.pyplot as plt
plt.plot([1, 2, 3], [4, 1, 9])
plt.title("trend")
plt.show()
"""


LEAN_START = """
import sys
started = (
    sys.argv[-1].rsplit("/", 1)[-1].startswith("kernel-sandgate-"),
    "jedi" in sys.modules,
    "prompt_toolkit" in sys.modules,
)
import jedi, IPython.terminal.embed, IPython
str(started + (callable(IPython.embed), "prompt_toolkit" in sys.modules))
"""


def scenario(args: list[str]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    sbx = Sandbox.create(envs={"SANDBOX_LEVEL": "sandbox"})
    try:
        out["first"] = execution_dict(sbx.run_code("x = 41\nx + 1"))
        out["state"] = execution_dict(sbx.run_code("x += 1\nprint(x)\nx"))
        out["error"] = execution_dict(sbx.run_code("1 / 0"))
        out["after_error"] = execution_dict(sbx.run_code("x"))
        out["envs"] = execution_dict(
            sbx.run_code(
                "import os\nos.environ['CELL_ONLY'] + ' ' + os.environ['SANDBOX_LEVEL']",
                envs={"CELL_ONLY": "cell"},
            )
        )
        out["envs_gone"] = execution_dict(sbx.run_code("os.environ.get('CELL_ONLY', 'unset')"))
        out["cwd"] = execution_dict(sbx.run_code("import os\nos.getcwd()"))
        out["debugpy"] = execution_dict(sbx.run_code("import debugpy\nbool(debugpy.__version__)"))
        out["lean_start"] = execution_dict(sbx.run_code(LEAN_START))

        events: list[dict[str, Any]] = []
        started = time.monotonic()

        def record(kind: str) -> Any:
            def callback(item: Any) -> None:
                entry: dict[str, Any] = {"kind": kind, "t": time.monotonic() - started}
                if kind in ("stdout", "stderr"):
                    entry["line"] = item.line
                    entry["timestamp"] = item.timestamp
                    entry["error"] = item.error
                elif kind == "result":
                    entry["result"] = result_dict(item)
                else:
                    entry["error"] = error_dict(item)
                events.append(entry)

            return callback

        streamed = sbx.run_code(
            "import sys, time\nprint('one', flush=True)\ntime.sleep(1.5)\n"
            "print('warn', file=sys.stderr, flush=True)\n7 * 6",
            on_stdout=record("stdout"),
            on_stderr=record("stderr"),
            on_result=record("result"),
            on_error=record("error"),
        )
        out["stream"] = {
            "execution": execution_dict(streamed),
            "events": events,
            "end": time.monotonic() - started,
        }
        errors: list[dict[str, Any]] = []
        sbx.run_code(
            "raise ValueError('bad value')", on_error=lambda e: errors.append(error_dict(e))
        )
        out["on_error"] = errors

        out["rich"] = execution_dict(sbx.run_code(RICH))
        out["plot"] = execution_dict(sbx.run_code(PLOT))
        out["dataframe"] = execution_dict(
            sbx.run_code("import pandas as pd\npd.DataFrame({'a': [1, 2], 'b': [3, 4]})")
        )
        out["imports"] = execution_dict(
            sbx.run_code("import numpy, pandas, matplotlib, openpyxl\nnumpy.arange(3).sum()")
        )

        out["js"] = execution_dict(sbx.run_code("const y = 20; y + 1", language="javascript"))
        out["js_state"] = execution_dict(
            sbx.run_code("console.log('js out'); y * 2", language="js")
        )
        out["js_env"] = execution_dict(
            sbx.run_code("Deno.env.get('JS_ENV')", language="javascript", envs={"JS_ENV": "on"})
        )
        out["js_error"] = execution_dict(
            sbx.run_code("throw new Error('js boom')", language="javascript")
        )
        out["ts"] = execution_dict(
            sbx.run_code("const n: number = 2; n ** 10", language="typescript")
        )
        out["bash"] = execution_dict(
            sbx.run_code(
                "Z=5; echo hello $((Z * 2)) $BASH_ENV_VAR",
                language="bash",
                envs={"BASH_ENV_VAR": "env"},
            )
        )
        out["bash_state"] = execution_dict(sbx.run_code("echo z=$Z", language="bash"))
        out["python_unaffected"] = execution_dict(sbx.run_code("x"))
    finally:
        out["cleanup"] = attempt(sbx.kill)
    return out


if __name__ == "__main__":
    run(scenario)
