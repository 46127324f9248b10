"""One writer thread does every audit write: the event loop only waits (issue 14, point 1)."""

from __future__ import annotations

import asyncio
import os
import threading
from pathlib import Path

import pytest

from sandgate.audit import AuditLog
from sandgate.config import load_config
from sandgate.errors import AuditUnavailable
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


def test_egress_records_index_their_destination_as_the_action(tmp_path: Path) -> None:
    """The console's audit page and /v1/audit read the index: an egress row must say where
    the sandbox tried to go, not only the decision."""
    path = tmp_path / "config.yaml"
    path.write_text(CONFIG)
    config = load_config(path, environ={"SANDGATE_HOME": str(tmp_path)})
    store = Store.open(f"sqlite:///{tmp_path / 'db.sqlite'}")
    gateway = build_gateway(config, store)

    async def write() -> None:
        await gateway.audit.write(
            {"event": "egress.connect", "host": "pypi.org", "port": 443, "outcome": "denied"}
        )
        await gateway.audit.write({"event": "egress.request", "host": "", "outcome": "denied"})
        await gateway.audit.write({"event": "tool.call", "host": "x", "outcome": "allowed"})

    asyncio.run(write())
    rows = sorted(store.search_audit(team_id=None, limit=10), key=lambda r: r.seq)
    assert [r.action for r in rows[-3:]] == ["pypi.org:443", None, None]


def test_a_write_whose_caller_is_cancelled_is_still_written(tmp_path: Path) -> None:
    """``write`` waits on the loop's own future, which the writer settles from its thread: a
    caller cancelled meanwhile withdraws nothing, and settling its cancelled future is not an
    error the loop reports."""
    store = Store.open(f"sqlite:///{tmp_path / 'db.sqlite'}")
    log = AuditLog(tmp_path / "audit", store)
    errors: list[dict[str, object]] = []

    async def main() -> dict[str, object]:
        asyncio.get_running_loop().set_exception_handler(lambda _, ctx: errors.append(ctx))
        gone = asyncio.ensure_future(log.write({"event": "tool.call", "n": 1}))
        await asyncio.sleep(0)  # queued
        gone.cancel()
        sealed = await log.write({"event": "tool.call", "n": 2})
        await asyncio.sleep(0)
        assert gone.cancelled()
        return sealed

    sealed = asyncio.run(main())
    log.close()
    assert [r["n"] for r in log.records()] == [1, 2] and sealed["seq"] == 2
    assert store.audit_head() == (2, sealed["hash"])
    assert errors == []


def test_a_write_the_writer_refuses_raises_on_the_loop(tmp_path: Path) -> None:
    log = AuditLog(tmp_path / "audit", None)

    async def main() -> None:
        with pytest.raises(AuditUnavailable, match="cannot be encoded"):
            await log.write({"event": "tool.call", "value": object()})
        assert (await log.write({"event": "tool.call"}))["seq"] == 1

    asyncio.run(main())
    log.close()


def test_queue_hands_the_record_over_before_the_caller_yields(tmp_path: Path) -> None:
    """``queue`` (what the sandbox service's lifecycle records use) has the record with the
    writer when it returns, so the record is written while the caller does other work; a
    coroutine would hand it over only once the loop ran it."""
    log = AuditLog(tmp_path / "audit", None)

    async def main() -> None:
        future = log.queue({"event": "sandbox.created"})
        log.close()  # writes what is queued and stops the writer, without yielding
        assert [r["event"] for r in log.records()] == ["sandbox.created"]
        assert (await future)["seq"] == 1

    asyncio.run(main())
