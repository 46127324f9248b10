"""Pause and resume (issue 18): ``pause(keep_memory=True)`` freezes (a running ``sleep`` and
the files survive ``connect``), a second pause answers False; ``pause(keep_memory=False)``
keeps the files only (``connect`` cold-boots: the file is there, the ``sleep`` is not, the
access token is the same)."""

from __future__ import annotations

from typing import Any

from _common import attempt, command_result, info_dict, run
from e2b import Sandbox

# Runs inside the sandbox, in its own pid namespace: pgrep sees the sandbox's processes only.
PROBE = "cat /home/user/note.txt; echo; pgrep -x sleep >/dev/null && echo sleeping || echo no-sleep"


def scenario(args: list[str]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    sbx = Sandbox.create("base", timeout=300)
    sandbox_id = sbx.sandbox_id
    out["sandbox_id"] = sandbox_id
    try:
        sbx.files.write("/home/user/note.txt", "kept")
        sbx.commands.run("sleep 1000", background=True, timeout=0)

        out["pause_memory"] = sbx.pause(keep_memory=True)
        out["info_memory"] = info_dict(Sandbox.get_info(sandbox_id))
        out["running_memory"] = sbx.is_running()
        out["pause_again"] = attempt(lambda: sbx.pause(keep_memory=True))
        resumed = Sandbox.connect(sandbox_id)
        out["probe_memory"] = command_result(resumed.commands.run(PROBE))

        out["pause_disk"] = resumed.pause(keep_memory=False)
        out["info_disk"] = info_dict(Sandbox.get_info(sandbox_id))
        out["running_disk"] = resumed.is_running()
        out["pause_disk_again"] = attempt(lambda: resumed.pause(keep_memory=False))
        cold = Sandbox.connect(sandbox_id)
        out["cold_id"] = cold.sandbox_id
        out["probe_disk"] = command_result(cold.commands.run(PROBE))
        out["info_after"] = info_dict(cold.get_info())
        out["token_kept"] = getattr(cold, "_envd_access_token", None) == getattr(
            sbx, "_envd_access_token", None
        )
    finally:
        out["cleanup"] = attempt(lambda: Sandbox.kill(sandbox_id))
    return out


if __name__ == "__main__":
    run(scenario)
