"""Control-plane lifecycle: create → run → info → list → set_timeout → connect → kill.

Argument: a random tag stored as ``metadata.suite`` so the list filters see only this run.
"""

from __future__ import annotations

from typing import Any

from _common import attempt, command_result, info_dict, list_all, now, run
from e2b import Sandbox, SandboxQuery, SandboxState


def scenario(args: list[str]) -> dict[str, Any]:
    tag = args[0]
    out: dict[str, Any] = {"tag": tag}
    sbx = Sandbox.create("base", envs={"FOO": "bar"}, metadata={"suite": tag})
    sandbox_id = sbx.sandbox_id
    out["sandbox_id"] = sandbox_id
    try:
        out["echo"] = command_result(sbx.commands.run("echo hi"))
        out["echo_env"] = command_result(sbx.commands.run("echo $FOO"))
        out["info"] = info_dict(sbx.get_info())
        out["info_static"] = info_dict(Sandbox.get_info(sandbox_id))

        by_tag = list_all(Sandbox, query=SandboxQuery(metadata={"suite": tag}))
        out["list_by_metadata"] = [info_dict(item) for item in by_tag]
        running = list_all(Sandbox, query=SandboxQuery(state=[SandboxState.RUNNING]))
        out["list_running_ids"] = [item.sandbox_id for item in running]
        paused = list_all(
            Sandbox, query=SandboxQuery(metadata={"suite": tag}, state=[SandboxState.PAUSED])
        )
        out["list_paused_by_metadata_ids"] = [item.sandbox_id for item in paused]

        out["set_timeout_before"] = now()
        sbx.set_timeout(120)
        out["set_timeout_after"] = now()
        out["info_after_timeout"] = info_dict(sbx.get_info())

        connected = Sandbox.connect(sandbox_id)
        out["connected_id"] = connected.sandbox_id
        out["connected_echo"] = command_result(connected.commands.run("echo connected"))
        out["is_running_before_kill"] = sbx.is_running()

        out["kill"] = sbx.kill()
        out["is_running_after_kill"] = sbx.is_running()
        after = list_all(Sandbox, query=SandboxQuery(metadata={"suite": tag}))
        out["list_after_kill_ids"] = [item.sandbox_id for item in after]
    finally:
        out["cleanup"] = attempt(lambda: Sandbox.kill(sandbox_id))
    return out


if __name__ == "__main__":
    run(scenario)
