"""Per-call timeout and disconnect interrupt the cell; crashes restart; output is bounded."""

from __future__ import annotations

import time
from typing import Any

from _code import execution_dict
from _common import attempt, describe_error, run
from e2b_code_interpreter import Sandbox


def scenario(args: list[str]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    sbx = Sandbox.create()
    try:
        sbx.run_code("kept = 'state'")
        started = time.monotonic()
        try:
            sbx.run_code("import time\ntime.sleep(60)", timeout=3)
            out["timeout"] = {"ok": True}
        except Exception as exc:
            out["timeout"] = {"ok": False, "error": describe_error(exc)}
        out["timeout_elapsed"] = time.monotonic() - started
        started = time.monotonic()
        out["after_timeout"] = execution_dict(sbx.run_code("kept"))
        out["after_timeout_elapsed"] = time.monotonic() - started

        out["crash"] = execution_dict(sbx.run_code("import os\nos._exit(3)"))
        out["after_crash"] = execution_dict(sbx.run_code("'kept' in globals(), 1 + 1"))

        sbx.run_code("kept = 'again'")
        started = time.monotonic()
        flood = sbx.run_code(
            "import sys\nchunk = 'x' * (1 << 20)\nwhile True:\n    sys.stdout.write(chunk)",
            timeout=120,
        )
        out["flood_elapsed"] = time.monotonic() - started
        out["flood"] = {
            "stdout_bytes": sum(len(s) for s in flood.logs.stdout),
            "stderr": list(flood.logs.stderr),
            "error": None
            if flood.error is None
            else {"name": flood.error.name, "value": flood.error.value},
        }
        out["after_flood"] = execution_dict(sbx.run_code("kept"))
    finally:
        out["cleanup"] = attempt(sbx.kill)
    return out


if __name__ == "__main__":
    run(scenario)
