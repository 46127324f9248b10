"""Foreground commands: output capture, cwd, env layering, users, timeouts and streaming."""

from __future__ import annotations

import time
from typing import Any

from _common import attempt, command_result, describe_error, run
from e2b import Sandbox

#: Quick commands run back to back: each must return its own output (no lost data events).
REPEATS = 30


def scenario(args: list[str]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    sbx = Sandbox.create("base", envs={"FOO": "sandbox"})
    try:
        cmd = sbx.commands
        out["true"] = command_result(cmd.run("true"))
        out["stderr"] = command_result(cmd.run("echo out; echo err >&2"))
        out["cwd"] = command_result(cmd.run("pwd", cwd="/tmp"))
        out["default_cwd"] = command_result(cmd.run("pwd"))
        out["env_override"] = command_result(cmd.run("echo $FOO", envs={"FOO": "command"}))
        out["env_sandbox"] = command_result(cmd.run("echo $FOO"))
        out["env_command_only"] = command_result(cmd.run("echo $BAR", envs={"BAR": "once"}))
        out["env_not_kept"] = command_result(cmd.run('echo "${BAR:-unset}"'))
        out["root_uid"] = command_result(cmd.run("id -u", user="root"))
        out["root_whoami"] = command_result(cmd.run("whoami", user="root"))
        out["default_whoami"] = command_result(cmd.run("whoami"))
        out["default_uid"] = command_result(cmd.run("id -u"))
        out["default_home"] = command_result(cmd.run("echo $HOME"))
        out["repeat_mismatches"] = [
            {"i": i, **command_result(r)}
            for i in range(REPEATS)
            if (r := cmd.run(f"echo {i}")).stdout != f"{i}\n"
        ]

        started = time.monotonic()
        try:
            cmd.run("sleep 10", timeout=2)
            out["timeout"] = {"ok": True}
        except Exception as exc:
            out["timeout"] = {"ok": False, "error": describe_error(exc)}
        out["timeout_elapsed"] = time.monotonic() - started

        chunks: list[dict[str, Any]] = []
        started = time.monotonic()

        def on_stdout(data: str) -> None:
            chunks.append({"t": time.monotonic() - started, "data": data})

        result = cmd.run("echo one; sleep 1.5; echo two", on_stdout=on_stdout)
        out["stream"] = {
            "result": command_result(result),
            "chunks": chunks,
            "end": time.monotonic() - started,
        }
    finally:
        out["cleanup"] = attempt(sbx.kill)
    return out


if __name__ == "__main__":
    run(scenario)
