"""The interpreter heals: a killed kernel, a killed server; a killed sandbox ends run_code."""

from __future__ import annotations

import threading
import time
from typing import Any

from _code import execution_dict
from _common import attempt, command_result, describe_error, run
from e2b_code_interpreter import Sandbox

KILL_SERVER = "pkill -KILL -f 'm sandgate[.]interpreter$'"


def scenario(args: list[str]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    sbx = Sandbox.create()
    try:
        sbx.run_code("kept = 1")
        ctx = sbx.create_code_context(cwd="/tmp")
        sbx.run_code("mine = 2", context=ctx)

        kernel_pid = int(sbx.run_code("import os\nos.getpid()").text)
        out["kill_kernel"] = command_result(sbx.commands.run(f"kill -9 {kernel_pid}"))
        out["after_kernel_kill"] = execution_dict(sbx.run_code("'kept' in globals(), 1 + 1"))
        out["ctx_untouched"] = execution_dict(sbx.run_code("mine", context=ctx))

        out["kill_server"] = command_result(sbx.commands.run(KILL_SERVER))
        started = time.monotonic()
        out["after_server_kill"] = execution_dict(sbx.run_code("1 + 1"))
        out["after_server_kill_s"] = time.monotonic() - started
        out["ctx_after_server_kill"] = execution_dict(
            sbx.run_code("import os\n'mine' in globals(), os.getcwd()", context=ctx)
        )
        out["listed_after"] = [c.id for c in sbx.list_code_contexts()]
        out["ctx_id"] = ctx.id

        running = threading.Event()
        outcome: dict[str, Any] = {}

        def long_cell() -> None:
            outcome.update(
                attempt(
                    lambda: sbx.run_code(
                        "import time\nprint('running', flush=True)\ntime.sleep(60)",
                        on_stdout=lambda _: running.set(),
                        timeout=120,
                    )
                )
            )

        worker = threading.Thread(target=long_cell)
        worker.start()
        out["cell_running"] = running.wait(60)
        killed_at = time.monotonic()
        out["kill"] = attempt(lambda: Sandbox.kill(sbx.sandbox_id))
        worker.join(90)
        out["killed_mid_cell"] = {
            "ok": outcome.get("ok"),
            "error": outcome.get("error"),
            "elapsed": time.monotonic() - killed_at,
        }
    except Exception as exc:
        out["unexpected"] = describe_error(exc)
        raise
    finally:
        out["cleanup"] = attempt(sbx.kill)
    return out


if __name__ == "__main__":
    run(scenario)
