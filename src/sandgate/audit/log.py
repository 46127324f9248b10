"""The audit log file and its index.

Trust: the gateway process is trusted to write; everyone else, including operators with
shell access, is only trusted to be *detected* (``verify``). The log lives under
``$SANDGATE_HOME/audit/``, which is never mounted into a sandbox (the mount is the sandbox's
own directory under ``sandboxes/``), so sandboxed code cannot see or touch it (GW-10).

Writing: an ``flock`` serialises writers across processes (``serve`` and an in-process
``sandgate run`` may share a home); each record is one ``write`` on an ``O_APPEND`` file, then
``fsync`` (unless ``audit.fsync: false``; concurrent writers share one fsync, and each returns
only once its own record is covered), then one index row. A write that fails raises
``AuditUnavailable`` and the pipeline fails the call closed.
"""

from __future__ import annotations

import fcntl
import json
import os
import threading
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from sandgate.audit.chain import GENESIS, VerifyResult, canonical, seal, verify_lines
from sandgate.errors import AuditUnavailable
from sandgate.store import AuditEntry, Store

__all__ = ["AuditLog"]

_TAIL_CHUNK = 64 * 1024


class AuditLog:
    def __init__(self, directory: Path, store: Store | None, *, fsync: bool = True) -> None:
        self.path = directory / "audit.jsonl"
        self._directory = directory
        self._store = store
        self._fsync = fsync
        self._lock = threading.Lock()
        self._known: tuple[int, int, str] | None = None  # (file size, seq, hash) we last wrote
        # Group commit: a record is durable once an fsync that began after its write has
        # finished. ``_written`` counts records written, ``_synced`` those made durable.
        self._sync_lock = threading.Lock()
        self._written = 0
        self._synced = 0

    def append(self, record: dict[str, Any]) -> dict[str, Any]:
        """Seals, writes, fsyncs and indexes one record; returns it once it is durable.

        Raises ``AuditUnavailable``. Concurrent callers share fsyncs (group commit): each
        returns only after an fsync that covers its own record.
        """
        record = {"time": datetime.now(UTC).isoformat(), **record}
        try:
            with self._lock:
                self._directory.mkdir(parents=True, exist_ok=True, mode=0o700)
                fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX)
                    size = os.fstat(fd).st_size
                    seq, prev = self._tail(size)
                    sealed = seal(record, seq + 1, prev)
                    line = (canonical(sealed) + "\n").encode()
                    os.write(fd, line)
                    self._known = (size + len(line), seq + 1, sealed["hash"])
                    self._written += 1
                    ticket = self._written
                finally:
                    os.close(fd)
            if self._fsync:
                self._sync(ticket)
        except OSError as exc:
            raise AuditUnavailable(
                f"cannot write the audit log {self.path} ({exc.strerror}); tool calls are "
                "refused until it is writable"
            ) from None
        self._index(sealed)
        return sealed

    def _sync(self, ticket: int) -> None:
        """Returns once record number ``ticket`` (of this process) is on disk."""
        with self._sync_lock:
            if self._synced >= ticket:
                return  # another caller's fsync, begun after our write, covered it
            covered = self._written
            fd = os.open(self.path, os.O_RDONLY)
            try:
                # SECURITY: fsync flushes the file's data whichever descriptor asks, so every
                # record written before this point becomes durable.
                os.fsync(fd)
            finally:
                os.close(fd)
            self._synced = covered

    def check_writable(self) -> None:
        """Raises ``AuditUnavailable`` unless a record could be appended right now; the
        pipeline calls this before executing a tool, so no tool runs unaudited."""
        try:
            self._directory.mkdir(parents=True, exist_ok=True, mode=0o700)
            os.close(os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600))
        except OSError as exc:
            raise AuditUnavailable(
                f"cannot write the audit log {self.path} ({exc.strerror}); tool calls are "
                "refused until it is writable"
            ) from None

    def records(self) -> Iterator[dict[str, Any]]:
        """Every record, oldest first (unverified: see ``verify``)."""
        for line in self._lines():
            yield json.loads(line)

    def verify(self) -> VerifyResult:
        """Checks the chain, then that the store's index holds no record the file lacks."""
        result = verify_lines(self._lines())
        if not result.ok or self._store is None:
            return result
        last = self._store.last_audit_entry()
        if last is not None and last.seq > result.checked:
            return VerifyResult(
                result.checked,
                result.last_hash,
                f"records {result.checked + 1}..{last.seq} are in the index but missing from "
                "the end of the log (truncated)",
                result.checked + 1,
            )
        if last is not None and last.seq == result.checked and last.hash != result.last_hash:
            return VerifyResult(
                result.checked,
                result.last_hash,
                f"record {last.seq} differs from its indexed hash (the log was rewritten)",
                last.seq,
            )
        return result

    def _lines(self) -> Iterator[str]:
        try:
            with self.path.open(encoding="utf-8") as handle:
                for line in handle:
                    if line.strip():
                        yield line.rstrip("\n")
        except FileNotFoundError:
            return

    def _tail(self, size: int) -> tuple[int, str]:
        """(seq, hash) of the last record in a file of ``size`` bytes."""
        if self._known is not None and self._known[0] == size:
            return self._known[1], self._known[2]
        if size == 0:
            return 0, GENESIS
        with self.path.open("rb") as handle:
            start = max(0, size - _TAIL_CHUNK)
            handle.seek(start)
            chunk = handle.read(size - start)
            while chunk.count(b"\n") < 2 and start > 0:
                start = max(0, start - _TAIL_CHUNK)
                handle.seek(start)
                chunk = handle.read(size - start)
        last = chunk.rstrip(b"\n").rsplit(b"\n", 1)[-1]
        record = json.loads(last)
        return int(record["seq"]), str(record["hash"])

    def _index(self, record: dict[str, Any]) -> None:
        if self._store is None:
            return
        subject = record.get("subject") or {}
        self._store.add_audit_entry(
            AuditEntry(
                seq=record["seq"],
                time=datetime.fromisoformat(record["time"]),
                event=record.get("event", "tool.call"),
                sandbox_id=record.get("sandbox"),
                team_id=subject.get("team"),
                agent=subject.get("agent"),
                tool=record.get("tool"),
                action=record.get("action"),
                outcome=record.get("outcome", ""),
                rule_id=record.get("rule"),
                duration_ms=record.get("duration_ms"),
                hash=record["hash"],
            )
        )
