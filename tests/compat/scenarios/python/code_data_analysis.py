"""The documented seed pattern (examples/data-analysis/run.py), run as it is.

Argument: the example's directory.
"""

from __future__ import annotations

import sys
from typing import Any

from _common import list_all, run
from e2b_code_interpreter import Sandbox


def scenario(args: list[str]) -> dict[str, Any]:
    sys.path.insert(0, args[0])
    import run as example  # the documented example itself

    result = example.analyse()
    still_listed = [s.sandbox_id for s in list_all(Sandbox) if s.sandbox_id == result["sandbox_id"]]
    return {
        "summary": result["summary"],
        "chart_magic": result["chart"][:8].hex(),
        "chart_bytes": len(result["chart"]),
        "stdout": result["stdout"],
        "still_listed": still_listed,
    }


if __name__ == "__main__":
    run(scenario)
