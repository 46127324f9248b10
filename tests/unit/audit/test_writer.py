"""One writer thread does every audit write: the event loop only waits (issue 14, point 1)."""

from __future__ import annotations

import asyncio
import os
import sqlite3
import threading
from pathlib import Path

import pytest
from sqlalchemy import select

from sandgate.audit import AuditLog
from sandgate.config import load_config
from sandgate.policy import Subject
from sandgate.store import Store
from sandgate.store.models import AuditEntry
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


def test_a_call_hears_back_once_durable_and_readers_of_the_index_wait_for_it(
    tmp_path: Path,
) -> None:
    """The answer does not wait for the store's index (the file is the record of truth),
    but a reader of the index sees every answered record: it waits for the index."""
    store = Store.open(f"sqlite:///{tmp_path / 'db.sqlite'}")
    store.migrate()
    audit = AuditLog(tmp_path / "audit", store)
    audit.append({"event": "first", "outcome": "ok"})
    blocker = sqlite3.connect(tmp_path / "db.sqlite", isolation_level=None)
    blocker.execute("BEGIN IMMEDIATE")  # the index cannot be written while this is held
    try:
        sealed = audit.append({"event": "second", "outcome": "ok"})
        assert sealed["seq"] == 2
        assert [r["event"] for r in audit.records()] == ["first", "second"]  # durable
        with store.session() as session:  # under the barrier: the index is one behind
            assert [e.seq for e in session.scalars(select(AuditEntry))] == [1]
    finally:
        blocker.execute("ROLLBACK")
        blocker.close()
    assert [e.event for e in store.audit_entries()] == ["first", "second"]
    last = store.last_audit_entry()
    assert last is not None and last.seq == 2
    audit.close()
    assert audit.check_head().state.value == "ok"
