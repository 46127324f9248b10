"""The exec executor with tools that never read their arguments from stdin (they exit first).

Under uvloop (what ``serve`` runs on) writing to a pipe whose reader has gone raises a
RuntimeError rather than BrokenPipeError; a fast tool must still just work.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

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
