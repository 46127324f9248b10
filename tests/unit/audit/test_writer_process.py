"""The audit writer process (``serve``): the server's interpreter only hands batches over.

Each test starts a real process of this interpreter on a real file and SQLite index.
"""

from __future__ import annotations

import asyncio
import json
import os
import select
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from sandgate.audit import AuditLog, AuditState, Checkpointer, read_checkpoints
from sandgate.audit._process import WriterProcess
from sandgate.errors import AuditTampered, AuditUnavailable
from sandgate.store import Store
from tests.fixtures.postgres import postgres_database

KEY = b"checkpoint-test-key"


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """A SQLite file, or a database of its own on the test PostgreSQL: the process opens the
    store from the URL the server's store was opened with."""
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'db.sqlite'}"
        return
    with postgres_database("sg_audit") as url:
        yield url


def build(home: Path) -> AuditLog:
    return AuditLog(home / "audit", Store.open(f"sqlite:///{home / 'db.sqlite'}"))


def kill_writer(log: AuditLog) -> int:
    """SIGKILLs the writer process and reaps it (so the log finds it gone); its pid."""
    pid = log.writer_pid
    assert pid is not None
    os.kill(pid, signal.SIGKILL)
    os.waitpid(pid, 0)
    return pid


def file_records(log: AuditLog) -> list[dict[str, object]]:
    return [json.loads(line) for line in log.path.read_text().splitlines()]


def test_the_process_seals_writes_indexes_and_checkpoints_what_the_loop_queues(
    tmp_path: Path, store_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = Store.open(store_url)
    checkpointer = Checkpointer(tmp_path / "anchor" / "audit.anchor", KEY, 10, 3600)
    log = AuditLog(tmp_path / "audit", store, checkpoint=checkpointer)
    assert log.start_process()
    pid = log.writer_pid
    assert pid is not None and pid != os.getpid()
    fsyncs: list[int] = []
    real_fsync = os.fsync
    monkeypatch.setattr(os, "fsync", lambda fd: (fsyncs.append(fd), real_fsync(fd)))

    async def many() -> list[dict[str, object]]:
        return await asyncio.gather(
            *(log.write({"event": "tool.call", "tool": "kv", "n": n}) for n in range(50))
        )

    sealed = asyncio.run(many())
    try:
        assert [r["seq"] for r in sealed] == list(range(1, 51))
        # What each caller got back is the record as the process wrote it, hash included.
        assert sealed == file_records(log)
        assert fsyncs == []  # every fsync happened in the writer process
        assert log.records_written == 50 and log.batches <= 50
        assert store.audit_head() == (50, sealed[-1]["hash"])
        points = read_checkpoints(tmp_path / "anchor" / "audit.anchor", KEY)
        assert points and all(p.valid for p in points) and points[-1].seq >= 10
        assert log.verify().ok
    finally:
        log.close()
        store.close()
    assert log.writer_pid is None
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)  # reaped: the process ended with the log


def test_tampering_found_by_the_process_fails_the_server_closed_until_recovered(
    tmp_path: Path,
) -> None:
    log = build(tmp_path)
    assert log.start_process()
    try:
        for n in range(6):
            log.append({"event": "tool.call", "n": n})
        content = log.path.read_text().splitlines()
        log.path.write_text("".join(line + "\n" for line in content[:4]))  # records 5, 6 cut

        with pytest.raises(AuditTampered) as refused:
            log.append({"event": "tool.call", "n": 6})
        assert "first bad record: 5" in refused.value.message
        # The server now knows what the process found: health, and calls refused before
        # any tool runs.
        assert log.health.state is AuditState.TAMPERED and log.health.first_bad == 5
        with pytest.raises(AuditTampered):
            log.check_writable()

        record = log.recover(by="test")
        assert record["seq"] == 7
        assert log.append({"event": "tool.call", "n": 7})["seq"] == 8
        assert log.health.state is AuditState.OK and log.verify().ok
    finally:
        log.close()


def test_a_writer_process_that_died_is_started_again_and_the_chain_goes_on(
    tmp_path: Path,
) -> None:
    log = build(tmp_path)
    assert log.start_process()
    try:
        first = log.append({"event": "tool.call", "n": 0})
        dead = kill_writer(log)

        second = log.append({"event": "tool.call", "n": 1})
        assert second["seq"] == first["seq"] + 1 and second["prev"] == first["hash"]
        assert log.writer_pid not in (None, dead)
        assert log.verify().ok
    finally:
        log.close()


def test_an_in_memory_store_keeps_the_writer_in_this_process() -> None:
    log = AuditLog(Path("/nonexistent"), Store.open("sqlite:///:memory:"))
    assert log.start_process() is False and log.writer_pid is None


def test_the_process_ignores_signals_meant_for_the_server(tmp_path: Path) -> None:
    """A service manager signals the whole group; the process must not die mid-batch, it
    ends when the server closes its pipe."""
    log = build(tmp_path)
    assert log.start_process()
    try:
        pid = log.writer_pid
        assert pid is not None
        os.kill(pid, signal.SIGTERM)
        os.kill(pid, signal.SIGINT)
        assert log.append({"event": "tool.call"})["seq"] == 1
        assert log.writer_pid == pid  # the same process wrote it
    finally:
        log.close()


SERVER = """
import sys
from pathlib import Path
from sandgate.audit import AuditLog
from sandgate.store import Store
home = Path(sys.argv[1])
log = AuditLog(home / "audit", Store.open(f"sqlite:///{home / 'db.sqlite'}"))
assert log.start_process()
log.append({"event": "tool.call"})
print(log.writer_pid, flush=True)
sys.stdin.read()
"""


def test_the_process_ends_when_the_server_is_killed(tmp_path: Path) -> None:
    server = subprocess.Popen(
        [sys.executable, "-c", SERVER, str(tmp_path)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
    )
    try:
        assert server.stdout is not None
        writer = int(server.stdout.readline())
        ended = os.pidfd_open(writer)  # readable once the process has ended
        try:
            server.kill()  # no chance to close anything
            server.wait()
            # Its stdin's end is all the process needs: it exits at once.
            readable, _, _ = select.select([ended], [], [], 60)
            assert readable == [ended]
        finally:
            os.close(ended)
    finally:
        server.kill()
        server.wait()


def test_a_writer_process_that_cannot_start_again_leaves_the_writing_to_the_thread(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    log = build(tmp_path)
    assert log.start_process()
    try:
        first = log.append({"event": "tool.call", "n": 0})
        kill_writer(log)

        def cannot_start(self: WriterProcess) -> None:
            raise AuditUnavailable("the audit writer process did not start: no interpreter")

        monkeypatch.setattr(WriterProcess, "start", cannot_start)
        second = log.append({"event": "tool.call", "n": 1})
        assert second["seq"] == first["seq"] + 1 and second["prev"] == first["hash"]
        assert log.writer_pid is None  # this process writes from now on
        assert log.verify().ok
    finally:
        log.close()
