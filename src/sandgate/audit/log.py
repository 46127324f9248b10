"""The audit log file, its anchor and its one writer.

Trust: the gateway process is trusted to write; everyone else, including operators with
shell access, is only trusted to be *detected*. The log lives under ``$SANDGATE_HOME/audit/``,
which is never mounted into a sandbox, so sandboxed code cannot see or touch it (GW-10).

Writing: records are handed to one writer thread per process (``submit``; ``await write`` on
an event loop), never written by the caller, so no fsync ever runs on an event loop. The
writer takes whatever is queued as one batch (group commit): under an ``flock`` (``serve``
and an in-process ``sandgate run`` may share a home) it checks the file's head against its
anchor, seals the records onto the chain, writes them in one ``write``, fsyncs once (unless
``audit.fsync: false``), indexes them in the store in one transaction, and only then resolves
each caller's future. A record is therefore durable when its caller hears back. ``serve``
moves that work into a writer process, to which its event loop hands the batches itself
(``start_loop_writer``: ``audit._pump``, ``audit._process``); the writer thread remains for
records of other commands and for when no process can run.

The anchor: the store indexes every record's hash, so its last row is the log's head as this
gateway wrote it (a signed checkpoint file, ``audit.checkpoint``, can hold a copy elsewhere).
Before every batch (and at start) the file's last record must be that head. A file that ends
earlier (truncated, rolled back), whose last record differs (rewritten, chain recomputed) or
whose last line is not a record is *tampered*: the log's health turns ``tampered``, every
append fails with ``audit_tampered`` naming the first bad record (found by a full
verification), and tool calls, which check before they run, fail closed. The state lasts until
the operator starts a new log with ``sandgate audit recover`` (or restarts after fixing it).
A file *ahead* of the anchor whose extra records continue the anchored one is what a crash
between the fsync and the index leaves: those records are indexed, not refused.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import enum
import fcntl
import hashlib
import json
import os
import queue
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, NoReturn

import structlog

from sandgate._atomic import write_all
from sandgate.audit._file import Head, file_lines, read_head, records_after
from sandgate.audit._process import Link, Tampered, WriterProcess
from sandgate.audit._pump import LoopPump
from sandgate.audit.chain import GENESIS, VerifyResult, canonical, link_problem, linked, seal
from sandgate.audit.checkpoint import Checkpointer, read_checkpoints
from sandgate.audit.verify import RECOVERED_EVENT, verify_log
from sandgate.errors import AuditTampered, AuditUnavailable, Conflict, SandgateError
from sandgate.store import AuditIndexer, Store

__all__ = ["AuditHealth", "AuditLog", "AuditState"]

log = structlog.get_logger("sandgate.audit")


class AuditState(enum.StrEnum):
    OK = "ok"  #: the file's head is the anchored head; appends go on
    TAMPERED = "tampered"  #: the file disagrees with its anchor; appends are refused


@dataclass(frozen=True)
class AuditHealth:
    state: AuditState
    problem: str | None = None
    first_bad: int | None = None
    since: str | None = None

    def as_dict(self) -> dict[str, Any]:
        data: dict[str, Any] = {"state": self.state.value}
        if self.state is AuditState.TAMPERED:
            data.update(problem=self.problem, first_bad_record=self.first_bad, since=self.since)
        return data


@dataclass
class _Pending:
    """A queued record and whoever waits for it: a thread's ``concurrent.futures.Future``
    (``submit``), or an event loop's own future (``write``), which the writer settles through
    ``call_soon_threadsafe``: no lock-backed future and no chaining per record on the loop's
    hot path (a tool call waits for one record)."""

    record: dict[str, Any]
    future: concurrent.futures.Future[dict[str, Any]] | None = None
    loop_future: asyncio.Future[dict[str, Any]] | None = None
    waiting: bool = True
    submitted: float = field(default_factory=time.monotonic)

    def start(self) -> None:
        """Called by the writer as it takes the record (a thread's cancelled future then no
        longer waits; a loop future's cancellation is seen when settling)."""
        if self.future is not None:
            self.waiting = self.future.set_running_or_notify_cancel()

    def settle(
        self,
        record: dict[str, Any] | None,
        error: BaseException | None = None,
        *,
        loop: asyncio.AbstractEventLoop | None = None,
    ) -> None:
        """Hands the outcome to the caller, unless it stopped waiting (the record stays).
        ``loop``: the loop this runs on, if any (a future of that loop is settled at once)."""
        if not self.waiting:
            return
        if self.loop_future is not None:
            if self.loop_future.get_loop() is loop:
                _settle_loop_future(self.loop_future, record or {}, error)
                return
            # A closed loop (RuntimeError) leaves nobody to tell.
            with contextlib.suppress(RuntimeError):
                self.loop_future.get_loop().call_soon_threadsafe(
                    _settle_loop_future, self.loop_future, record or {}, error
                )
        elif self.future is not None:
            if error is not None:
                self.future.set_exception(error)
            else:
                self.future.set_result(record or {})


def _settle_loop_future(
    future: asyncio.Future[dict[str, Any]], record: dict[str, Any], error: BaseException | None
) -> None:
    if future.done():  # the caller was cancelled; the record was written all the same
        return
    if error is not None:
        future.set_exception(error)
    else:
        future.set_result(record)


class _StoreIndex:
    """The store as ``audit.verify.Index``."""

    def __init__(self, store: Store) -> None:
        self._store = store

    def head(self) -> tuple[int, str] | None:
        return self._store.audit_head()

    def hashes(self, first: int, last: int) -> dict[int, str]:
        return self._store.audit_hashes(first, last)


class AuditLog:
    def __init__(
        self,
        directory: Path,
        store: Store | None,
        *,
        fsync: bool = True,
        checkpoint: Checkpointer | None = None,
    ) -> None:
        self.path = directory / "audit.jsonl"
        self._directory = directory
        self._store = store
        self._fsync = fsync
        self._checkpoint = checkpoint
        self._queue: queue.SimpleQueue[_Pending | None] = queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        self._thread_lock = threading.Lock()
        self._health = AuditHealth(AuditState.OK)
        self._tampered_inode: int | None = None
        #: The file as this process last left it (after its own write or check).
        self._last: Head | None = None
        #: Records written and batches committed (one write + one fsync each), since start.
        self.records_written = 0
        self.batches = 0
        #: Told of each durable record and the seconds since it was submitted (the metrics);
        #: called on the writer thread (or ``serve``'s event loop), must be quick and must not
        #: raise.
        self.on_commit: Callable[[dict[str, Any], float], None] | None = None
        #: Seals, writes and indexes the writer thread's batches once started
        #: (``start_process``).
        self._process: WriterProcess | None = None
        #: Or hands an event loop's batches to a process of its own (``start_loop_writer``).
        self._pump: LoopPump | None = None
        #: Indexes the records on one connection (under the ``flock``, so one thread at once).
        self._indexer: AuditIndexer | None = None

    # -- writing --------------------------------------------------------------------------

    def submit(self, record: dict[str, Any]) -> concurrent.futures.Future[dict[str, Any]]:
        """Queues ``record`` for the writer and returns at once; the future holds the sealed
        record once it is durable and indexed, or ``AuditUnavailable``/``AuditTampered``.
        Raises ``AuditTampered`` right away while the log is known to be tampered."""
        future: concurrent.futures.Future[dict[str, Any]] = concurrent.futures.Future()
        self._enqueue(_Pending(record, future=future))
        return future

    async def write(self, record: dict[str, Any]) -> dict[str, Any]:
        """Appends ``record`` and returns it sealed once it is durable; the event loop only
        waits. Raises ``AuditUnavailable`` or ``AuditTampered``. Cancelling the wait does not
        withdraw the record."""
        return await self.queue(record)

    def queue(self, record: dict[str, Any]) -> asyncio.Future[dict[str, Any]]:
        """``write`` for a caller on an event loop with more to do meanwhile: the record is
        queued now (a coroutine would queue it only once it first runs), the future resolves
        as ``write`` returns. Raises ``AuditTampered`` at once while the log is tampered."""
        future: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        self._enqueue(_Pending(record, loop_future=future))
        return future

    def _enqueue(self, pending: _Pending, *, blocking: bool = False) -> None:
        self._refuse_if_tampered()
        pending.record = {"time": datetime.now(UTC).isoformat(), **pending.record}
        pump = self._pump
        # A caller about to block its thread on the record must not be that loop's thread:
        # its pump could never run. The writer thread takes that record instead.
        if pump is not None and not (blocking and pump.on_loop_thread()) and pump.put(pending):
            return
        self.to_writer_thread(pending)

    def to_writer_thread(self, pending: _Pending) -> None:
        """Queues a record for the writer thread (also where a loop's pump sends what it
        can no longer write: stopped, or its process cannot start)."""
        self._ensure_writer()
        self._queue.put(pending)

    def append(self, record: dict[str, Any]) -> dict[str, Any]:
        """``write`` for synchronous callers (CLI, tests); never call it on an event loop
        (it blocks the loop until the record is durable)."""
        future: concurrent.futures.Future[dict[str, Any]] = concurrent.futures.Future()
        self._enqueue(_Pending(record, future=future), blocking=True)
        return future.result()

    def check_writable(self) -> None:
        """Raises unless a record could be appended right now: ``AuditTampered`` while the log
        is tampered, ``AuditUnavailable`` when its directory or file cannot be opened. The
        pipeline calls this before executing a tool, so no tool runs unaudited."""
        self._refuse_if_tampered()
        try:
            try:
                fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
            except FileNotFoundError:  # no directory yet (a fresh home): the one slow path
                self._directory.mkdir(parents=True, exist_ok=True, mode=0o700)
                fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
            os.close(fd)
        except OSError as exc:
            raise _unavailable(self.path, exc) from None

    def start_process(self, *, log_level: str = "info", json_logs: bool = False) -> bool:
        """Moves sealing, writing and indexing into a process of its own (see
        ``audit._process``); the writer thread hands it each batch. False (logged) when it
        cannot start: the writer thread then writes, as it does for every other command.
        The store must be one another process can open (not an in-memory SQLite). May run
        on any thread while records are written (they are, on the thread, until the process
        is ready); ``close`` only once it has returned. ``serve`` uses ``start_loop_writer``
        instead, which spares each batch the writer thread."""
        if self._process is not None:
            return True
        process = self._started_process(log_level, json_logs)
        if process is None:
            return False
        self._process = process
        return True

    async def start_loop_writer(self, *, log_level: str = "info", json_logs: bool = False) -> bool:
        """``start_process`` for ``serve``: the running event loop itself hands each batch to
        the process and reads its answer (``audit._pump``), no writer thread in between;
        records submitted from other threads are handed to the loop. The process starts on
        a worker thread (the loop goes on meanwhile; the writer thread writes until it is
        ready). False (logged) when it cannot start. ``stop_loop_writer`` before ``close``."""
        if self._pump is not None or self._process is not None:
            return True
        process = await asyncio.to_thread(self._started_process, log_level, json_logs)
        if process is None:
            return False
        pump = LoopPump(self, process)
        try:
            await pump.open()
        except OSError as exc:
            log.error("audit.writer_in_thread", why=str(exc))
            await asyncio.to_thread(process.close)
            return False
        self._pump = pump
        return True

    async def stop_loop_writer(self) -> None:
        """Writes every record the loop holds, then ends its process; records queued from
        now on go to the writer thread (``close`` writes them)."""
        pump = self._pump
        if pump is None:
            return
        await pump.close()
        if self._pump is pump:
            self._pump = None
        await asyncio.to_thread(pump.process.close)

    def _started_process(self, log_level: str, json_logs: bool) -> WriterProcess | None:
        setup: dict[str, Any] = {
            "directory": str(self._directory),
            "store_url": None,
            "fsync": self._fsync,
            "checkpoint": None,
            "log_level": log_level,
            "json_logs": json_logs,
        }
        if self._store is not None:
            url = self._store.engine.url
            if url.get_backend_name() == "sqlite" and url.database in (None, "", ":memory:"):
                log.warning("audit.writer_in_thread", why="the store is in memory")
                return None
            setup["store_url"] = url.render_as_string(hide_password=False)
        if self._checkpoint is not None:
            setup["checkpoint"] = self._checkpoint.settings()
        process = WriterProcess(setup)
        try:
            process.start()
        except (AuditUnavailable, OSError) as exc:
            log.error("audit.writer_in_thread", why=str(exc))
            return None
        return process

    def pump_stopped(self, pump: LoopPump) -> None:
        """Told by a loop's pump whose process can no longer be started: the writer thread
        writes from now on (the pump hands it what it holds)."""
        if self._pump is pump:
            self._pump = None

    def close(self) -> None:
        """Writes what is queued, then stops the writer thread (a later submit restarts it)
        and the writer process. A loop's writer (``start_loop_writer``) is stopped first,
        on its loop (``stop_loop_writer``); one left running only has its process ended."""
        pump, self._pump = self._pump, None
        if pump is not None:
            log.error("audit.loop_writer_not_stopped")
            pump.process.close()
        with self._thread_lock:
            thread, self._thread = self._thread, None
        if thread is not None:
            self._queue.put(None)
            thread.join()
        process, self._process = self._process, None
        if process is not None:
            process.close()
        indexer, self._indexer = self._indexer, None
        if indexer is not None:
            indexer.close()

    # -- health ---------------------------------------------------------------------------

    @property
    def health(self) -> AuditHealth:
        return self._health

    @property
    def writer_pid(self) -> int | None:
        """The writer process's pid while one writes (``start_process``,
        ``start_loop_writer``), else None."""
        pump = self._pump
        process = pump.process if pump is not None else self._process
        return process.pid if process is not None else None

    @property
    def tampered_inode(self) -> int | None:
        """The inode of the file found tampered (a new file at the path is checked afresh)."""
        return self._tampered_inode

    def check_head(self, *, full: bool = False) -> AuditHealth:
        """Checks the file's head against the anchor now (at start, by ``doctor``), and with
        ``full`` the whole log; returns the health (tampered is also logged as an error)."""
        try:
            with self._locked() as fd:
                self._verified_head(fd)
                if self._checkpoint is not None:
                    self._check_checkpoints(fd)
        except AuditTampered:
            return self._health
        except AuditUnavailable as exc:
            log.error("audit.unavailable", error=exc.message)
            return self._health
        if full:
            result = self.verify()
            if not result.ok:
                with contextlib.suppress(AuditTampered):
                    self._tampered(result.problem or "the log does not verify", result.first_bad)
        return self._health

    # -- reading --------------------------------------------------------------------------

    def records(self) -> Iterator[dict[str, Any]]:
        """Every record, oldest first (unverified: see ``verify``)."""
        for line in file_lines(self.path):
            yield json.loads(line)

    def verify(self) -> VerifyResult:
        """The whole log against the store's index and the signed checkpoints."""
        checkpoints = (
            read_checkpoints(self._checkpoint.path, self._checkpoint.key)
            if self._checkpoint is not None
            else []
        )
        index = _StoreIndex(self._store) if self._store is not None else None
        name = str(self._checkpoint.path) if self._checkpoint is not None else ""
        return verify_log(file_lines(self.path), index, checkpoints, name)

    def recover(self, *, by: str) -> dict[str, Any]:
        """Starts a new log after damage: the damaged file is kept beside it, renamed
        ``audit.jsonl.damaged-<time>``, and the new file's first record (``audit.recovered``)
        continues the store's anchored head, naming the damaged file, its SHA-256 and what was
        wrong. Raises ``Conflict`` when the log verifies (nothing to recover)."""
        with self._locked() as fd:
            result = self.verify()
            if result.ok:
                raise Conflict(
                    f"the audit log verifies ({result.checked} records): there is nothing to "
                    "recover"
                )
            stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%S%fZ")
            damaged = self.path.with_name(f"{self.path.name}.damaged-{stamp}")
            digest = hashlib.sha256()
            for chunk in iter(lambda: os.read(fd, 1 << 20), b""):
                digest.update(chunk)
            anchor = (self._store.audit_head() if self._store is not None else None) or (
                0,
                GENESIS,
            )
            record = seal(
                {
                    "time": datetime.now(UTC).isoformat(),
                    "event": RECOVERED_EVENT,
                    "outcome": "recovered",
                    "damaged_file": damaged.name,
                    "damaged_sha256": digest.hexdigest(),
                    "problem": result.problem,
                    "first_bad_record": result.first_bad,
                    "by": by,
                },
                anchor[0] + 1,
                anchor[1],
            )
            fresh = self.path.with_name(f".{self.path.name}.{stamp}.tmp")
            data = (canonical(record) + "\n").encode()
            out = os.open(fresh, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            try:
                write_all(out, data)
                os.fsync(out)
            finally:
                os.close(out)
            os.link(self.path, damaged)
            os.replace(fresh, self.path)
            _sync_directory(self._directory)
            self._index([record])
        self._last = None
        self._health = AuditHealth(AuditState.OK)
        self._tampered_inode = None
        log.warning("audit.recovered", damaged=damaged.name, seq=record["seq"], by=by)
        return record

    # -- the writer -----------------------------------------------------------------------

    def _ensure_writer(self) -> None:
        thread = self._thread
        if thread is not None and thread.is_alive():
            return
        with self._thread_lock:
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(
                    target=self._run, name="sandgate-audit-writer", daemon=True
                )
                self._thread.start()

    def _run(self) -> None:
        while True:
            first = self._queue.get()
            if first is None:
                return
            batch, stop = [first], False
            while True:
                try:
                    item = self._queue.get_nowait()
                except queue.Empty:
                    break
                if item is None:
                    stop = True
                    break
                batch.append(item)
            self._write_batch(batch)
            if stop:
                return

    def _write_batch(self, batch: list[_Pending]) -> None:
        writable, lines = self.prepare(batch)
        if not writable:
            return
        records = [pending.record for pending in writable]
        try:
            process = self._process
            if process is not None and not process.running and not self._restart(process):
                process = None
            if process is not None:
                sealed = self._commit_in_process(process, records, lines)
            else:
                sealed = self.commit(records)
        except Exception as exc:
            self.fail(writable, exc)
            return
        self.settle(writable, sealed)

    def prepare(self, batch: list[_Pending]) -> tuple[list[_Pending], list[str]]:
        """The batch's records that can be written, and their canonical lines; a record
        that cannot be encoded is refused to its caller (the others are written)."""
        writable: list[_Pending] = []
        lines: list[str] = []
        for pending in batch:
            # A caller that was cancelled no longer waits, but its record is still written.
            pending.start()
            try:
                lines.append(canonical(pending.record))
            except (TypeError, ValueError) as exc:
                pending.settle(None, AuditUnavailable(f"an audit record cannot be encoded ({exc})"))
                continue
            writable.append(pending)
        return writable, lines

    def fail(
        self,
        writable: list[_Pending],
        exc: Exception,
        *,
        loop: asyncio.AbstractEventLoop | None = None,
    ) -> None:
        """Tells a batch's callers why it was not written (a writer bug, logged, becomes
        ``AuditUnavailable``: it must not leave them waiting forever)."""
        error: SandgateError
        if isinstance(exc, SandgateError):
            error = exc
        else:
            log.exception("audit.writer_failed")
            error = AuditUnavailable(f"the audit writer failed ({type(exc).__name__})")
        for pending in writable:
            pending.settle(None, error, loop=loop)

    def settle(
        self,
        writable: list[_Pending],
        sealed: list[dict[str, Any]],
        *,
        loop: asyncio.AbstractEventLoop | None = None,
    ) -> None:
        """Hands each caller its durable record, and tells the observer."""
        durable = time.monotonic()
        for pending, record in zip(writable, sealed, strict=True):
            pending.settle(record, loop=loop)
            if self.on_commit is not None:
                try:
                    self.on_commit(record, durable - pending.submitted)
                except Exception:  # an observer's bug must not leave callers waiting
                    log.exception("audit.observer_failed")

    def _restart(self, process: WriterProcess) -> bool:
        """Starts a writer process that ended again; if it cannot start, this thread writes
        from now on (logged), so a broken interpreter never stops the log."""
        try:
            process.restart()
        except (AuditUnavailable, OSError) as exc:
            log.error("audit.writer_in_thread", why=str(exc))
            self._process = None
            return False
        log.warning("audit.writer_restarted", pid=process.pid)
        return True

    def _commit_in_process(
        self, process: WriterProcess, records: list[dict[str, Any]], lines: list[str]
    ) -> list[dict[str, Any]]:
        """``commit`` in the writer process; its verdict on a tampered log becomes this
        log's health, as if this process had found it."""
        try:
            links = process.commit(lines)
        except AuditTampered:
            self.refused(process.tampered)
            raise
        return self.sealed_by_process(records, links)

    def refused(self, verdict: Tampered | None) -> None:
        """Mirrors the writer process's verdict on a tampered log (if it gave one)."""
        if verdict is None:
            return
        if self._health.state is not AuditState.TAMPERED:
            log.error("audit.tampered", problem=verdict.problem, first_bad_record=verdict.first_bad)
        self._health = AuditHealth(
            AuditState.TAMPERED, verdict.problem, verdict.first_bad, verdict.since
        )
        self._tampered_inode = verdict.inode

    def sealed_by_process(
        self, records: list[dict[str, Any]], links: list[Link]
    ) -> list[dict[str, Any]]:
        """The records as the writer process sealed them, given their links."""
        self._last = None  # the file moved on without this process: read its head afresh
        self.records_written += len(links)
        self.batches += 1
        return [linked(record, *link) for record, link in zip(records, links, strict=True)]

    def commit(self, records: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """Seals and appends one batch now, on the calling thread (the writer thread, or the
        writer process): head check, seal, one write, one fsync, one index transaction.
        Returns the sealed records; raises ``AuditTampered`` or ``AuditUnavailable``."""
        self._refuse_if_tampered()
        with self._locked() as fd:
            head = self._verified_head(fd)
            seq, prev = head.seq, head.hash
            sealed: list[dict[str, Any]] = []
            data = bytearray()
            for record in records:
                seq += 1
                done = seal(record, seq, prev)
                prev = done["hash"]
                sealed.append(done)
                data += (canonical(done) + "\n").encode()
            try:
                write_all(fd, bytes(data))
                if self._fsync:
                    os.fsync(fd)
            except OSError as exc:
                with contextlib.suppress(OSError):
                    os.ftruncate(fd, head.size)  # no half-written record stays behind
                raise _unavailable(self.path, exc) from None
            self._last = Head(head.inode, head.size + len(data), seq, prev)
            self.records_written += len(sealed)
            self.batches += 1
            self._index(sealed)
            if self._checkpoint is not None and self._checkpoint.due(seq):
                try:
                    self._checkpoint.write(seq, prev)
                except OSError as exc:
                    log.error("audit.checkpoint_failed", path=str(self._checkpoint.path), error=exc)
        return sealed

    @contextlib.contextmanager
    def _locked(self) -> Iterator[int]:
        try:
            try:
                fd = os.open(self.path, os.O_RDWR | os.O_APPEND | os.O_CREAT, 0o600)
            except FileNotFoundError:  # no directory yet (a fresh home)
                self._directory.mkdir(parents=True, exist_ok=True, mode=0o700)
                fd = os.open(self.path, os.O_RDWR | os.O_APPEND | os.O_CREAT, 0o600)
        except OSError as exc:
            raise _unavailable(self.path, exc) from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield fd
        finally:
            os.close(fd)

    def _verified_head(self, fd: int) -> Head:
        """The file's head, once it is known to be the anchored head (or to continue it);
        raises ``AuditTampered``."""
        _drop_partial_line(fd)
        head = read_head(fd)
        if self._last is not None and head == self._last:
            return head  # exactly as this process left it: nobody else wrote since
        anchor = self._anchor()
        if head.seq < 0:
            self._tampered("the last line of the log is not an audit record")
        if anchor is None or (head.seq, head.hash) == anchor:
            self._last = head
            return head
        if head.seq > anchor[0]:
            self._index_gap(fd, head, anchor)
            self._last = head
            return head
        self._tampered(
            f"the log ends at record {head.seq} but the store anchors record {anchor[0]}"
            if head.seq < anchor[0]
            else f"record {head.seq} is not the record the store anchored"
        )

    def _anchor(self) -> tuple[int, str] | None:
        if self._store is not None:
            return self._store.audit_head() or (0, GENESIS)
        if self._last is not None:
            return self._last.seq, self._last.hash
        return None

    def _index_gap(self, fd: int, head: Head, anchor: tuple[int, str]) -> None:
        """Indexes records a crash left unindexed, if they continue the anchored record."""
        if anchor[0] == 0:
            result = verify_log(file_lines(self.path), None)
            if not result.ok:
                self._tampered(result.problem or "the log does not verify", result.first_bad)
            records = list(self.records())
        else:
            after = records_after(fd, anchor[0])
            if after is None or after[0].get("hash") != anchor[1]:
                self._tampered(f"record {anchor[0]} is not the record the store anchored")
            records = after[1:]
            prev = anchor[1]
            for offset, record in enumerate(records, start=1):
                if link_problem(record, anchor[0] + offset, prev, 0) is not None:
                    self._tampered(f"record {anchor[0] + offset} does not continue the chain")
                prev = str(record["hash"])
        if records:
            log.warning(
                "audit.reindexed", first=records[0]["seq"], last=records[-1]["seq"], why="crash"
            )
            self._index(records)

    def _check_checkpoints(self, fd: int) -> None:
        assert self._checkpoint is not None  # the caller checked
        points = read_checkpoints(self._checkpoint.path, self._checkpoint.key)
        if not points:
            return
        if not all(p.valid for p in points):
            self._tampered(f"{self._checkpoint.path} holds a checkpoint with a bad signature")
        top = max(points, key=lambda p: p.seq)
        head = read_head(fd)
        if head.seq < top.seq:
            self._tampered(
                f"the log ends at record {head.seq} but the signed checkpoint of {top.time} "
                f"covers record {top.seq}"
            )
        after = records_after(fd, top.seq)
        if after is None or after[0].get("hash") != top.hash:
            self._tampered(f"record {top.seq} is not the record the signed checkpoint holds")

    def _tampered(self, what: str, first_bad: int | None = None) -> NoReturn:
        """Marks the log tampered (diagnosing the first bad record) and raises."""
        if first_bad is None:
            result = self.verify()
            if not result.ok:
                what, first_bad = result.problem or what, result.first_bad
        message = (
            f"the audit log {self.path} was tampered with: {what}"
            + (f" (first bad record: {first_bad})" if first_bad is not None else "")
            + ". Nothing more is appended and tool calls are refused: inspect it with "
            "`sandgate audit verify`, then start a new log with `sandgate audit recover`"
        )
        if self._health.state is not AuditState.TAMPERED:
            log.error("audit.tampered", problem=what, first_bad_record=first_bad)
        self._health = AuditHealth(
            AuditState.TAMPERED, what, first_bad, datetime.now(UTC).isoformat()
        )
        with contextlib.suppress(OSError):
            self._tampered_inode = os.stat(self.path).st_ino
        raise AuditTampered(message)

    def _refuse_if_tampered(self) -> None:
        if self._health.state is not AuditState.TAMPERED:
            return
        try:
            inode = os.stat(self.path).st_ino
        except OSError:
            inode = None
        if inode is not None and inode != self._tampered_inode:
            # A new file (``sandgate audit recover`` in another process): check it afresh.
            self._health = AuditHealth(AuditState.OK)
            self._last = None
            return
        raise AuditTampered(
            f"the audit log {self.path} was tampered with: {self._health.problem}"
            + (
                f" (first bad record: {self._health.first_bad})"
                if self._health.first_bad is not None
                else ""
            )
            + ". Nothing more is appended and tool calls are refused: inspect it with "
            "`sandgate audit verify`, then start a new log with `sandgate audit recover`"
        )

    def _index(self, records: list[dict[str, Any]]) -> None:
        if self._store is None:
            return
        try:
            if self._indexer is None:
                self._indexer = self._store.audit_indexer()
            self._indexer.add([_entry(record) for record in records])
        except Exception as exc:  # the file is the record of truth; the gap is indexed later
            log.error("audit.index_failed", first=records[0]["seq"], error=repr(exc)[:300])


def _entry(record: dict[str, Any]) -> dict[str, Any]:
    """The index row (``AuditEntry`` columns) of a sealed record."""
    subject = record.get("subject") or {}
    return {
        "seq": record["seq"],
        "time": datetime.fromisoformat(record["time"]),
        "event": str(record.get("event", "tool.call"))[:32],
        "sandbox_id": record.get("sandbox"),
        "team_id": subject.get("team") if isinstance(subject, dict) else None,
        "agent": subject.get("agent") if isinstance(subject, dict) else None,
        "tool": record.get("tool"),
        "action": record.get("action") or _destination(record),
        "outcome": str(record.get("outcome", "")),
        "rule_id": record.get("rule"),
        "duration_ms": record.get("duration_ms"),
        "hash": record["hash"],
    }


def _destination(record: dict[str, Any]) -> str | None:
    """An egress record's ``host:port``, indexed as its action so a search of the index (the
    console's audit page, ``/v1/audit``) shows where the sandbox tried to go."""
    event, host = str(record.get("event", "")), record.get("host")
    if not event.startswith("egress.") or not isinstance(host, str) or not host:
        return None
    port = record.get("port")
    return (f"{host}:{port}" if isinstance(port, int) else host)[:200]


def _drop_partial_line(fd: int) -> None:
    """A crash in the middle of a write can leave a last line without its newline (records
    are written whole, newline included); such a fragment is removed, never kept."""
    size = os.fstat(fd).st_size
    if size == 0 or os.pread(fd, 1, size - 1) == b"\n":
        return
    start = max(0, size - 1024 * 1024)
    tail = os.pread(fd, size - start, start)
    cut = tail.rfind(b"\n")
    keep = start + cut + 1 if cut >= 0 else 0
    if cut < 0 and start > 0:
        return  # a megabyte without a newline is not a crash fragment; the head check says so
    log.warning("audit.partial_record_removed", bytes=size - keep)
    os.ftruncate(fd, keep)


def _sync_directory(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _unavailable(path: Path, exc: OSError) -> AuditUnavailable:
    return AuditUnavailable(
        f"cannot write the audit log {path} ({exc.strerror}); tool calls are refused until it "
        "is writable"
    )
