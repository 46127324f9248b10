"""The audit writer process (``serve``): the server's interpreter only hands batches over.

Each test starts a real process of this interpreter on a real file and SQLite index.
"""

from __future__ import annotations

import asyncio
import fcntl
import json
import os
import select
import signal
import struct
import subprocess
import sys
import termios
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import pytest

from sandgate.audit import AuditLog, AuditState, Checkpointer, read_checkpoints
from sandgate.audit._process import WriterProcess
from sandgate.errors import AuditTampered, AuditUnavailable
from sandgate.store import Store
from tests.fixtures.postgres import postgres_database

KEY = b"checkpoint-test-key"
T = TypeVar("T")


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """A SQLite file, or a database of its own on the test PostgreSQL: the process opens the
    store from the URL the server's store was opened with."""
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'db.sqlite'}"
        return
    with postgres_database("sg_audit") as url:
        yield url


@pytest.fixture
def log(tmp_path: Path) -> Iterator[AuditLog]:
    """A log on a SQLite file of its own, closed after the test (its writer process too)."""
    audit = AuditLog(tmp_path / "audit", Store.open(f"sqlite:///{tmp_path / 'db.sqlite'}"))
    yield audit
    audit.close()


def on_loop_writer(log: AuditLog, scenario: Callable[[], Awaitable[T]]) -> T:
    """Runs ``scenario`` on an event loop whose writer process the log starts first and
    stops last, as ``serve``'s lifespan does: also when the scenario failed, so threads
    waiting on the loop are answered before it ends."""

    async def run() -> T:
        assert await log.start_loop_writer()
        try:
            return await scenario()
        finally:
            await log.stop_loop_writer()

    return asyncio.run(run())


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
    log: AuditLog,
) -> None:
    assert log.start_process()
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


def test_a_writer_process_that_died_is_started_again_and_the_chain_goes_on(log: AuditLog) -> None:
    assert log.start_process()
    first = log.append({"event": "tool.call", "n": 0})
    dead = kill_writer(log)

    second = log.append({"event": "tool.call", "n": 1})
    assert second["seq"] == first["seq"] + 1 and second["prev"] == first["hash"]
    assert log.writer_pid not in (None, dead)
    assert log.verify().ok


def test_an_in_memory_store_keeps_the_writer_in_this_process() -> None:
    log = AuditLog(Path("/nonexistent"), Store.open("sqlite:///:memory:"))
    assert log.start_process() is False and log.writer_pid is None


def test_the_process_ignores_signals_meant_for_the_server(log: AuditLog) -> None:
    """A service manager signals the whole group; the process must not die mid-batch, it
    ends when the server closes its pipe."""
    assert log.start_process()
    pid = log.writer_pid
    assert pid is not None
    os.kill(pid, signal.SIGTERM)
    os.kill(pid, signal.SIGINT)
    assert log.append({"event": "tool.call"})["seq"] == 1
    assert log.writer_pid == pid  # the same process wrote it


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
    log: AuditLog, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert log.start_process()
    first = log.append({"event": "tool.call", "n": 0})
    kill_writer(log)

    def cannot_start(self: WriterProcess) -> None:
        raise AuditUnavailable("the audit writer process did not start: no interpreter")

    monkeypatch.setattr(WriterProcess, "start", cannot_start)
    second = log.append({"event": "tool.call", "n": 1})
    assert second["seq"] == first["seq"] + 1 and second["prev"] == first["hash"]
    assert log.writer_pid is None  # this process writes from now on
    assert log.verify().ok


# -- serve: the event loop hands the batches over itself (audit._pump) ---------------------------


def test_the_loop_hands_its_batches_to_the_process_without_a_writer_thread(
    tmp_path: Path, store_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = Store.open(store_url)
    log = AuditLog(tmp_path / "audit", store)
    fsyncs: list[int] = []
    real_fsync = os.fsync
    monkeypatch.setattr(os, "fsync", lambda fd: (fsyncs.append(fd), real_fsync(fd)))

    async def scenario() -> tuple[list[dict[str, Any]], dict[str, Any], int]:
        pid = log.writer_pid
        assert pid is not None and pid != os.getpid()
        # A record submitted on another thread is handed to the loop, not to a thread.
        elsewhere = asyncio.to_thread(log.append, {"event": "agent.run"})
        sealed = await asyncio.gather(
            *(log.write({"event": "tool.call", "tool": "kv", "n": n}) for n in range(50))
        )
        return sealed, await elsewhere, pid

    try:
        sealed, other, pid = on_loop_writer(log, scenario)
        got = sorted([*sealed, other], key=lambda r: int(r["seq"]))
        assert [r["seq"] for r in got] == list(range(1, 52))
        # What each caller got back is the record as the process wrote it, hash included.
        assert got == file_records(log)
        assert fsyncs == []  # every fsync happened in the writer process
        assert log._thread is None  # no writer thread ever started
        assert log.records_written == 51 and log.batches <= 51
        assert store.audit_head() == (51, file_records(log)[-1]["hash"])
        assert log.verify().ok
        assert log.writer_pid is None
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)  # reaped: stopping the loop's writer ended the process
    finally:
        log.close()
        store.close()


def test_a_loop_writer_whose_process_ended_starts_another_and_the_chain_goes_on(
    log: AuditLog,
) -> None:
    async def scenario() -> tuple[dict[str, Any], dict[str, Any]]:
        first = await log.write({"event": "tool.call", "n": 0})
        dead = kill_writer(log)
        second = await log.write({"event": "tool.call", "n": 1})
        assert second["seq"] == first["seq"] + 1 and second["prev"] == first["hash"]
        assert log.writer_pid not in (None, dead)

        # Ended while it held a batch: that batch's callers hear 503, the next one goes on.
        pid = log.writer_pid
        assert pid is not None
        os.kill(pid, signal.SIGSTOP)
        held = log.queue({"event": "tool.call", "n": 2})
        await _until_sent(pid)
        os.kill(pid, signal.SIGKILL)
        with pytest.raises(AuditUnavailable, match="ended"):
            await held
        third = await log.write({"event": "tool.call", "n": 3})
        assert log.writer_pid not in (None, pid)
        return second, third

    second, third = on_loop_writer(log, scenario)
    # Stopped before it read the batch, the process never wrote the held record.
    assert third["seq"] == second["seq"] + 1 and third["prev"] == second["hash"]
    assert [r["n"] for r in file_records(log)] == [0, 1, 3]
    assert log.verify().ok


async def _until_sent(pid: int) -> None:
    """Yields to the loop until a batch waits in the (stopped) process's stdin pipe."""
    stdin = f"/proc/{pid}/fd/0"
    fd = os.open(stdin, os.O_RDONLY | os.O_NONBLOCK)
    try:
        while not struct.unpack("i", fcntl.ioctl(fd, termios.FIONREAD, b"\0" * 4))[0]:
            await asyncio.sleep(0)
    finally:
        os.close(fd)


def test_a_loop_writer_whose_process_cannot_start_again_leaves_the_writing_to_the_thread(
    log: AuditLog, monkeypatch: pytest.MonkeyPatch
) -> None:
    def cannot_start(self: WriterProcess) -> None:
        raise AuditUnavailable("the audit writer process did not start: no interpreter")

    async def scenario() -> None:
        first = await log.write({"event": "tool.call", "n": 0})
        kill_writer(log)
        monkeypatch.setattr(WriterProcess, "start", cannot_start)
        rest = await asyncio.gather(*(log.write({"event": "tool.call", "n": n}) for n in (1, 2)))
        assert [r["seq"] for r in rest] == [first["seq"] + 1, first["seq"] + 2]
        assert log.writer_pid is None  # this process writes from now on, on its thread
        assert log._thread is not None

    on_loop_writer(log, scenario)
    assert log.verify().ok


def test_tampering_found_through_the_loop_fails_the_server_closed_until_recovered(
    log: AuditLog,
) -> None:
    async def scenario() -> None:
        for n in range(6):
            await log.write({"event": "tool.call", "n": n})
        content = log.path.read_text().splitlines()
        log.path.write_text("".join(line + "\n" for line in content[:4]))  # records 5, 6 cut

        with pytest.raises(AuditTampered) as refused:
            await log.write({"event": "tool.call", "n": 6})
        assert "first bad record: 5" in refused.value.message
        assert log.health.state is AuditState.TAMPERED and log.health.first_bad == 5
        with pytest.raises(AuditTampered):
            log.check_writable()

        assert log.recover(by="test")["seq"] == 7
        assert (await log.write({"event": "tool.call", "n": 7}))["seq"] == 8

    on_loop_writer(log, scenario)
    assert log.health.state is AuditState.OK and log.verify().ok


def test_stopping_the_loop_writer_writes_everything_it_was_handed(log: AuditLog) -> None:
    async def scenario() -> list[asyncio.Future[dict[str, object]]]:
        queued = [log.queue({"event": "tool.call", "n": n}) for n in range(30)]
        await log.stop_loop_writer()  # nothing awaited the records yet
        assert all(future.done() for future in queued)
        after = await log.write({"event": "tool.call", "n": 30})  # to the writer thread
        assert after["seq"] == 31
        return queued

    queued = on_loop_writer(log, scenario)
    assert [future.result()["seq"] for future in queued] == list(range(1, 31))
    assert [r["n"] for r in file_records(log)] == list(range(31))


def test_a_blocking_append_on_the_loop_itself_is_written_by_the_thread(log: AuditLog) -> None:
    # Misuse (it blocks the loop), but it must not deadlock: the loop's pump cannot run
    # while its own thread waits.
    async def scenario() -> None:
        first = await log.write({"event": "tool.call", "n": 0})
        second = log.append({"event": "tool.call", "n": 1})
        assert second["seq"] == first["seq"] + 1 and second["prev"] == first["hash"]
        assert log._thread is not None

    on_loop_writer(log, scenario)
    assert log.verify().ok


def test_every_caller_hears_back_while_the_loop_writer_is_killed_under_load(
    log: AuditLog,
) -> None:
    """Records from the loop and from four threads at once, the process SIGKILLed in the
    middle (after each of the first two waves, when one runs): every caller hears back (its
    sealed record, or ``audit_unavailable``), every record confirmed is in the file as
    sealed, and the chain verifies."""
    confirmed: list[dict[str, Any]] = []
    refused: list[BaseException] = []
    killed: list[int] = []

    def from_thread(worker: int) -> None:
        for n in range(40):
            try:
                confirmed.append(log.append({"event": "agent.run", "worker": worker, "n": n}))
            except AuditUnavailable as exc:
                refused.append(exc)

    async def scenario() -> None:
        threaded = asyncio.gather(*(asyncio.to_thread(from_thread, w) for w in range(4)))
        for wave in range(3):
            outcomes = await asyncio.gather(
                *(log.write({"event": "tool.call", "wave": wave, "n": n}) for n in range(60)),
                return_exceptions=True,
            )
            for outcome in outcomes:
                if isinstance(outcome, AuditUnavailable):
                    refused.append(outcome)
                else:
                    assert isinstance(outcome, dict), outcome
                    confirmed.append(outcome)
            pid = log.writer_pid  # None while a new one starts
            if wave < 2 and pid is not None and _kill_exactly(pid):
                killed.append(pid)  # not reaped here: a batch finds it gone
        await threaded

    on_loop_writer(log, scenario)
    assert killed and len(confirmed) + len(refused) == 4 * 40 + 3 * 60
    assert confirmed and all("ended" in str(exc) for exc in refused)
    assert len({int(r["hash"], 16) for r in confirmed}) == len(confirmed)
    written = {int(r["seq"]): r for r in file_records(log)}  # type: ignore[call-overload]
    for record in confirmed:
        assert written[record["seq"]] == record
    assert log.verify().ok


def _kill_exactly(pid: int) -> bool:
    """SIGKILLs that very process (a pidfd: never another that reused its pid once it was
    reaped); False if it is already gone."""
    try:
        fd = os.pidfd_open(pid)
    except ProcessLookupError:
        return False
    try:
        signal.pidfd_send_signal(fd, signal.SIGKILL)
    except ProcessLookupError:
        return False
    finally:
        os.close(fd)
    return True
