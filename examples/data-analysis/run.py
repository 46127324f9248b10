"""Seed production pattern: upload data and a script, run a fixed entry point, read results.

    pip install e2b-code-interpreter
    eval "$(sandgate env)"          # E2B_API_KEY, E2B_API_URL, E2B_SANDBOX_URL, ...
    python examples/data-analysis/run.py

Writes ``summary.json`` and ``chart.png`` into the current directory and prints the summary.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from e2b_code_interpreter import Sandbox

HERE = Path(__file__).resolve().parent
JOB_DIR = "/home/user/job"
#: The one cell we ever run: the job's behaviour lives in the uploaded script, not here.
ENTRY_POINT = f"import runpy\nrunpy.run_path('{JOB_DIR}/analysis.py', run_name='__main__')"

SALES_CSV = """region,product,amount
north,widget,120.5
south,widget,80
north,gadget,42
east,gadget,310.25
south,gizmo,99.75
east,widget,15
"""


def analyse(sales_csv: str = SALES_CSV) -> dict[str, Any]:
    """Runs the job in a fresh sandbox, then kills it; returns the sandbox id, the summary,
    the chart bytes and the job's stdout."""
    sbx = Sandbox.create(timeout=300)
    try:
        sbx.files.write(f"{JOB_DIR}/sales.csv", sales_csv)
        sbx.files.write(f"{JOB_DIR}/analysis.py", (HERE / "analysis.py").read_text())
        execution = sbx.run_code(ENTRY_POINT, timeout=120)
        if execution.error is not None:
            raise RuntimeError(
                f"analysis failed: {execution.error.name}: {execution.error.value}\n"
                f"{execution.error.traceback}"
            )
        summary = json.loads(sbx.files.read(f"{JOB_DIR}/out/summary.json"))
        chart = bytes(sbx.files.read(f"{JOB_DIR}/out/chart.png", format="bytes"))
        return {
            "sandbox_id": sbx.sandbox_id,
            "summary": summary,
            "chart": chart,
            "stdout": "".join(execution.logs.stdout),
        }
    finally:
        sbx.kill()


def main() -> None:
    result = analyse()
    Path("summary.json").write_text(json.dumps(result["summary"], indent=2))
    Path("chart.png").write_bytes(result["chart"])
    print(result["stdout"], end="")
    json.dump(result["summary"], sys.stdout, indent=2)
    print()


if __name__ == "__main__":
    main()
