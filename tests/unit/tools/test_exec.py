"""The exec executor with tools that never read their arguments from stdin (they exit first).

Under uvloop (what ``serve`` runs on) writing to a pipe whose reader has gone raises a
RuntimeError rather than BrokenPipeError; a fast tool must still just work.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
import uvloop

from sandgate.tools.executors.exec import ExecExecutor
from sandgate.tools.tool import Subject, ToolContext


def _context(tmp_path: Path) -> ToolContext:
    return ToolContext(
        tool="quick",
        subject=Subject(sandbox_id="sb", team_id="team"),
        secrets={},
        home=tmp_path,
        timeout_s=10,
        output_limit=4096,
    )


def test_tools_that_exit_without_reading_stdin(tmp_path: Path) -> None:
    executor = ExecExecutor(["/bin/sh", "-c", "printf '{\"ok\": true}'; exec 0<&-"], {})

    async def many() -> list[object]:
        return await asyncio.gather(
            *(executor.run({"text": "x" * 70000}, _context(tmp_path)) for _ in range(40))
        )

    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        results = runner.run(many())
    assert results == [{"ok": True}] * 40


def test_point_5_exec_tools_run_in_a_clean_environment_and_a_private_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SANDGATE_HOST_ONLY", "host")
    monkeypatch.chdir(tmp_path)
    # /proc/self/environ is the environment as exec'd (Python itself adds LC_CTYPE later).
    program = (
        "import json, os; raw = open('/proc/self/environ', 'rb').read().split(b'\\0'); "
        "env = dict(e.decode().split('=', 1) for e in raw if e); "
        "print(json.dumps({'env': env, 'cwd': os.getcwd()}))"
    )
    executor = ExecExecutor(["python3", "-c", program], {"SETTING": "configured"})
    context = ToolContext(
        tool="env",
        subject=Subject(sandbox_id="sb", team_id="team"),
        secrets={"TOKEN": "t0k"},
        home=tmp_path / "home",
        timeout_s=10,
        output_limit=65536,
    )
    first, second = asyncio.run(_twice(executor, context))
    assert first["env"] == {"SETTING": "configured", "TOKEN": "t0k"}
    work = tmp_path / "home" / "tools" / "work"
    assert Path(first["cwd"]).parent == work and first["cwd"] != second["cwd"]
    assert list(work.iterdir()) == []  # removed when each call ended


async def _twice(executor: ExecExecutor, context: ToolContext) -> list[Any]:
    return [await executor.run({}, context), await executor.run({}, context)]
