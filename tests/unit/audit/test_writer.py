"""One writer thread does every audit write: the event loop only waits (issue 14, point 1)."""

from __future__ import annotations

import asyncio
import os
import threading
from pathlib import Path

import pytest

from sandgate.config import load_config
from sandgate.policy import Subject
from sandgate.store import Store
from sandgate.tools import build_gateway

CONFIG = """
tools:
  - {name: kv, kind: builtin}
policy:
  rules:
    - {id: all, effect: allow, tool: kv}
"""


def test_no_fsync_runs_on_the_event_loop(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    threads: list[str] = []
    real_fsync = os.fsync

    def watched(fd: int) -> None:
        threads.append(threading.current_thread().name)
        real_fsync(fd)

    monkeypatch.setattr(os, "fsync", watched)
    path = tmp_path / "config.yaml"
    path.write_text(CONFIG)
    config = load_config(path, environ={"SANDGATE_HOME": str(tmp_path)})
    gateway = build_gateway(config, Store.open(f"sqlite:///{tmp_path / 'db.sqlite'}"))
    subject = Subject(sandbox_id="sb", team_id="t")

    async def many() -> str:
        calls = [
            gateway.call(subject, "kv", {"op": "set", "key": f"k{n}", "value": n})
            for n in range(50)
        ]
        replies = await asyncio.gather(*calls)
        assert all(reply.ok for reply in replies)
        await gateway.audit.write({"event": "sandbox.attach", "outcome": "attached"})
        return threading.current_thread().name

    loop_thread = asyncio.run(many())
    assert threads, "records were fsynced"
    assert set(threads) == {"sandgate-audit-writer"} and loop_thread not in threads
    assert gateway.audit.records_written == 51 and gateway.audit.batches < 51
