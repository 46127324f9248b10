"""The event loop's end of the audit writer process (``serve``).

With the writer thread between them, every batch cost the server's interpreter two thread
wake-ups and two lock hand-overs beside the pipe's own: the loop queued a record, the thread
woke to take it, sent it, woke again for the answer and woke the loop back through its
self-pipe, each hand-over contending for the one interpreter lock the event loop needs. Here
the loop talks to the process itself: records queued on the loop go into the next batch, one
batch is in flight at a time (whatever arrives meanwhile is the next one: group commit, as on
the thread), and the process's answer wakes the loop through the pipe it arrives on. Records
submitted on other threads are handed to the loop. It measured about a quarter more tool
calls per second than the thread (docs/benchmarks.md, "Tool calls").

What the thread guaranteed still holds: a record is acknowledged only once the process has
made it durable and indexed it; a process that ended is started again for the next batch
(on a worker thread: its start waits for its imports), and one that cannot start leaves the
writing to the writer thread (``AuditLog.pump_stopped``), which is handed what is queued.
"""

from __future__ import annotations

import asyncio
import json
import os
import threading
from typing import IO, TYPE_CHECKING, Any

import structlog

from sandgate.audit._process import Refused, WriterProcess, batch_line, ended, outcome_of
from sandgate.errors import AuditTampered, AuditUnavailable

if TYPE_CHECKING:
    from sandgate.audit.log import AuditLog, _Pending

__all__ = ["LoopPump"]

log = structlog.get_logger("sandgate.audit")

#: An answer holds three short fields per record: a burst of many thousand records fits.
_ANSWER_LIMIT = 64 * 1024 * 1024


class LoopPump:
    """Batches of one event loop's records, handed to a writer process by that loop."""

    def __init__(self, audit: AuditLog, process: WriterProcess) -> None:
        self._audit = audit
        self.process = process
        self._loop = asyncio.get_running_loop()
        self._loop_thread = threading.get_ident()
        self._pending: list[_Pending] = []
        self._task: asyncio.Task[None] | None = None
        self._reader: asyncio.StreamReader | None = None
        self._answers: asyncio.ReadTransport | None = None
        self._writer: asyncio.WriteTransport | None = None
        #: The process answered out of turn or not at all: it is replaced before the next batch.
        self._broken = False
        #: Stopped (``close``) or gone to the thread: records go to the writer thread.
        self._closed = False

    async def open(self) -> None:
        """Connects the loop to the process's pipes; raises ``OSError``. The loop's
        transports own duplicates of the pipes' descriptors, so they and ``WriterProcess``
        each close their own (the process reads its end of stdin until both are closed)."""
        stdin, stdout = self.process.pipes()
        reader = asyncio.StreamReader(limit=_ANSWER_LIMIT)
        answers, _ = await self._loop.connect_read_pipe(
            lambda: asyncio.StreamReaderProtocol(reader), _duplicate(stdout, "rb")
        )
        try:
            writer, _ = await self._loop.connect_write_pipe(
                asyncio.Protocol, _duplicate(stdin, "wb")
            )
        except BaseException:
            answers.close()
            raise
        self._reader, self._answers, self._writer = reader, answers, writer

    def on_loop_thread(self) -> bool:
        return threading.get_ident() == self._loop_thread

    def put(self, pending: _Pending) -> bool:
        """Takes a record for the next batch; False once stopped (the caller then gives it
        to the writer thread)."""
        if self._closed:
            return False
        if self.on_loop_thread():
            self._take(pending)
            return True
        try:
            self._loop.call_soon_threadsafe(self._take, pending)
        except RuntimeError:  # the loop is closed
            return False
        return True

    async def close(self) -> None:
        """Writes every record taken (and any taken meanwhile), then lets go of the pipes;
        what is submitted afterwards goes to the writer thread."""
        while self._task is not None:
            await asyncio.shield(self._task)
        self._closed = True
        self._disconnect()

    def _take(self, pending: _Pending) -> None:
        if self._closed:  # handed over from another thread after the pump stopped
            self._audit.to_writer_thread(pending)
            return
        self._pending.append(pending)
        if self._task is None:
            self._task = self._loop.create_task(self._run(), name="audit-pump")

    async def _run(self) -> None:
        try:
            while self._pending and not self._closed:
                if (self._broken or not self.process.running) and not await self._restart():
                    return
                batch, self._pending = self._pending, []
                await self._write(batch)
        except Exception as exc:  # a bug here must not leave the callers waiting forever
            pending, self._pending = self._pending, []
            self._audit.fail(pending, exc, loop=self._loop)
        finally:
            self._task = None

    async def _write(self, batch: list[_Pending]) -> None:
        writable, lines = self._audit.prepare(batch)
        if not writable:
            return
        records = [pending.record for pending in writable]
        try:
            outcome = outcome_of(await self._exchange(batch_line(lines)), len(lines))
            if isinstance(outcome, Refused):
                if isinstance(outcome.error, AuditTampered):
                    self._audit.refused(outcome.tampered)
                raise outcome.error
            sealed = self._audit.sealed_by_process(records, outcome)
        except Exception as exc:
            self._audit.fail(writable, exc, loop=self._loop)
            return
        self._audit.settle(writable, sealed, loop=self._loop)

    async def _exchange(self, line: bytes) -> dict[str, Any]:
        assert self._reader is not None and self._writer is not None
        self._writer.write(line)
        try:
            answer = await self._reader.readline()
        except ValueError:  # an answer beyond the limit: not one of ours
            answer = b"?"
        except asyncio.CancelledError:
            self._broken = True  # its answer would be read as the next batch's
            raise
        if not answer:
            self._broken = True
            raise ended(self.process.exit_code())
        try:
            reply = json.loads(answer)
        except ValueError:
            reply = None
        if not isinstance(reply, dict):
            self._broken = True
            raise AuditUnavailable("the audit writer process answered out of turn; restarting it")
        return reply

    async def _restart(self) -> bool:
        """Replaces the process (one that ended, or answered out of turn). If none can be
        started, the writer thread writes from now on and is handed what is queued."""
        self._disconnect()
        try:
            await asyncio.to_thread(self.process.restart)
            await self.open()
        except (AuditUnavailable, OSError) as exc:
            log.error("audit.writer_in_thread", why=str(exc))
            self._disconnect()
            await asyncio.to_thread(self.process.close)  # started, but the loop cannot reach it
            self._closed = True
            self._audit.pump_stopped(self)
            pending, self._pending = self._pending, []
            for item in pending:
                self._audit.to_writer_thread(item)
            return False
        self._broken = False
        log.warning("audit.writer_restarted", pid=self.process.pid)
        return True

    def _disconnect(self) -> None:
        for transport in (self._writer, self._answers):
            if transport is not None:
                transport.close()
        self._reader = self._answers = self._writer = None


def _duplicate(pipe: IO[bytes], mode: str) -> IO[bytes]:
    return os.fdopen(os.dup(pipe.fileno()), mode, buffering=0)
