"""Sandbox logs (E2B's ``GET /sandboxes/{id}/logs`` and ``/v2``): lifecycle and processes.

Two sources, one ring per sandbox in the store:

* the gateway's own lifecycle events (created, paused, resumed, killed and why), written as
  they happen, logger ``sandboxSvc``;
* the guest's process log (``guest._journal``: each process's start, its output line by line,
  its end), logger ``processSvc``, collected every ``sandbox_logs.collect_interval_s`` from
  each running sandbox, before a sandbox is paused or killed, and when someone reads the logs
  of a running sandbox (so a reader, like ``e2b sandbox logs --follow``, sees output at once).

Bounds (no tenant turns its logs into host disk pressure): a ring of
``sandbox_logs.max_entries_per_sandbox`` per sandbox, entries older than
``sandbox_logs.retention_hours`` deleted, and the whole table capped at
``sandbox_logs.max_total_mib`` (oldest first, any sandbox). The guest's own ring is bounded in
the sandbox's memory; entries it dropped before collection are reported by one warning.

SECURITY: the guest speaks for the sandbox and is not trusted here. Every entry it sends is
checked (shape, types, level and event from fixed sets), its text cut to a bounded size and
made storable (no NUL, no lone surrogate), its time clamped to the past retention window, and
its fields limited in number and size; an entry that fails a check is skipped.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Final

import structlog

from sandgate._periodic import Periodic
from sandgate.config import SandboxLogsConfig
from sandgate.errors import SandgateError
from sandgate.guest.client import GuestClient, GuestError
from sandgate.store import NewLogEntry, SandboxLogEntry, Store, TelemetryRecords

__all__ = ["LEVELS", "STOP_COLLECT_TIMEOUT_S", "SandboxLogs", "level_at_least"]

log = structlog.get_logger("sandgate.telemetry")

#: E2B's log levels, lowest first.
LEVELS: Final = ("debug", "info", "warn", "error")
_PRUNE_INTERVAL_S = 60.0
#: How long one collection may wait for a guest in all (a frozen or dying one must not hold
#: the timer); before a pause or kill, ``STOP_COLLECT_TIMEOUT_S``.
COLLECT_TIMEOUT_S = 5.0
STOP_COLLECT_TIMEOUT_S = 2.0
#: Replies asked for in one collection; the guest's ring is smaller than this many replies.
_MAX_ROUNDS = 8
_MAX_MESSAGE = 8192
_MAX_FIELDS = 16
_MAX_FIELD = 1024
_ENTRY_OVERHEAD = 64
_PROCESS_EVENTS: Final = frozenset({"process_start", "process_output", "process_end"})
_STREAMS: Final = frozenset({"stdout", "stderr"})
_RESERVED: Final = frozenset({"logger", "event_type", "pid", "stream", "level", "message"})


class SandboxLogs:
    """Writes, collects and reads sandbox log entries (see the module docstring)."""

    def __init__(
        self,
        config: SandboxLogsConfig,
        store: Store,
        guest_of: Callable[[str], GuestClient],
    ) -> None:
        self._config = config
        self._store = store
        self._records = TelemetryRecords(store)
        self._guest_of = guest_of
        self._cursors: dict[str, int] = {}
        self._locks: dict[str, asyncio.Lock] = {}
        self._loop = Periodic(
            "sandbox-logs",
            self._tick,
            interval_s=lambda: self._config.collect_interval_s,
            errors=SandgateError,
            on_error=lambda exc: log.warning("logs.collect_failed", error=exc.message),
            fixed_rate=True,
        )
        self._pruned = 0.0

    async def start(self) -> None:
        self._pruned = asyncio.get_running_loop().time()
        self._loop.start()

    async def stop(self) -> None:
        await self._loop.stop()

    # -- writing --------------------------------------------------------------------------

    async def record(
        self, sandbox_id: str, level: str, message: str, fields: Mapping[str, str]
    ) -> None:
        """Writes one gateway entry (a lifecycle event) now. Raises ``SandgateError``."""
        entry = _entry(
            sandbox_id,
            int(time.time() * 1000),
            level,
            message,
            {"logger": "sandboxSvc", **fields},
            None,
        )
        await asyncio.to_thread(
            self._records.add_log_entries, [entry], self._config.max_entries_per_sandbox
        )

    async def collect(self, sandbox_id: str, *, timeout_s: float = COLLECT_TIMEOUT_S) -> int:
        """Moves what the sandbox's guest recorded since the last collection into the store;
        returns how many entries it stored. The guest gets ``timeout_s`` in all to answer;
        one that cannot be reached in time is skipped (its entries wait for the next
        collection, or are lost with the sandbox). Entries received are always stored before
        the cursor moves past them, so none is stored twice."""
        lock = self._locks.setdefault(sandbox_id, asyncio.Lock())
        async with lock:
            cursor = self._cursors.get(sandbox_id)
            if cursor is None:
                cursor = await asyncio.to_thread(self._records.last_guest_seq, sandbox_id)
            stored = 0
            guest = self._guest_of(sandbox_id)
            loop = asyncio.get_running_loop()
            deadline = loop.time() + timeout_s
            for _ in range(_MAX_ROUNDS):
                left = deadline - loop.time()
                if left <= 0:
                    break
                try:
                    reply = await guest.logs(cursor, timeout_s=left)
                except GuestError as exc:
                    log.debug("logs.collect_skipped", sandbox=sandbox_id, error=exc.message)
                    break
                entries, cursor, more = self._parse(sandbox_id, reply, cursor)
                await asyncio.to_thread(
                    self._records.add_log_entries, entries, self._config.max_entries_per_sandbox
                )
                self._cursors[sandbox_id] = cursor
                stored += len(entries)
                if not more:
                    break
            return stored

    def begin(self, sandbox_id: str) -> None:
        """A sandbox just created: none of its guest's entries can be stored yet (its id is
        new), so its first collection needs no look at the store for where to resume."""
        self._cursors.setdefault(sandbox_id, 0)

    def forget(self, sandbox_id: str) -> None:
        """Drops the collection state of a sandbox that ended."""
        self._cursors.pop(sandbox_id, None)
        self._locks.pop(sandbox_id, None)

    def _parse(
        self, sandbox_id: str, reply: Mapping[str, Any], after: int
    ) -> tuple[list[NewLogEntry], int, bool]:
        now_ms = int(time.time() * 1000)
        floor_ms = now_ms - int(self._config.retention_hours * 3600 * 1000)
        first, last = reply.get("first"), reply.get("last")
        raw_entries = reply.get("entries")
        if not (
            isinstance(first, int)
            and isinstance(last, int)
            and _is_int(first)
            and _is_int(last)
            and isinstance(raw_entries, list)
        ):
            log.warning("logs.bad_reply", sandbox=sandbox_id)
            return [], after, False
        entries: list[NewLogEntry] = []
        if first > after + 1:
            lost = min(first, last + 1) - after - 1
            # Dated like the oldest entry that survived: the gap is where it sits in time.
            checked = (_guest_entry(sandbox_id, r, after, now_ms, floor_ms) for r in raw_entries)
            oldest = next((e for e in checked if e is not None), None)
            entries.append(
                _entry(
                    sandbox_id,
                    oldest.time_ms if oldest is not None else now_ms,
                    "warn",
                    f"{lost} log entries were dropped inside the sandbox before they could be "
                    "collected (its processes wrote faster than the log keeps)",
                    {"logger": "processSvc", "event_type": "log_dropped", "count": str(lost)},
                    None,
                )
            )
        cursor = after
        for raw in raw_entries:
            entry = _guest_entry(sandbox_id, raw, cursor, now_ms, floor_ms)
            seq = raw[0] if isinstance(raw, list) and raw and _is_int(raw[0]) else None
            if entry is not None:
                entries.append(entry)
            if seq is not None and seq > cursor:
                cursor = seq  # a refused entry is not asked for again either
        return entries, cursor, reply.get("more") is True and bool(raw_entries)

    # -- reading --------------------------------------------------------------------------

    async def entries(
        self,
        sandbox_id: str,
        *,
        start_ms: int | None = None,
        end_ms: int | None = None,
        newest_first: bool = False,
        limit: int,
    ) -> Sequence[SandboxLogEntry]:
        return await asyncio.to_thread(
            lambda: self._records.log_entries(
                sandbox_id,
                start_ms=start_ms,
                end_ms=end_ms,
                newest_first=newest_first,
                limit=limit,
            )
        )

    # -- background -----------------------------------------------------------------------

    async def _tick(self) -> None:
        began = asyncio.get_running_loop().time()
        running = await asyncio.to_thread(self._running)
        for sandbox_id in running:
            await self.collect(sandbox_id)
        for gone in set(self._cursors) - set(running):
            if not self._locks.get(gone, asyncio.Lock()).locked():
                self.forget(gone)
        if began - self._pruned >= _PRUNE_INTERVAL_S:
            self._pruned = began
            await asyncio.to_thread(self._prune)

    def _running(self) -> list[str]:
        return [row.id for row in self._store.live_sandboxes() if row.state == "running"]

    def _prune(self) -> None:
        cutoff = int((time.time() - self._config.retention_hours * 3600) * 1000)
        self._records.prune_logs(cutoff, self._config.max_total_mib * 1024 * 1024)


def level_at_least(level: str, minimum: str) -> bool:
    """Whether ``level`` is ``minimum`` or above (E2B's ``level`` filter)."""
    return LEVELS.index(level) >= LEVELS.index(minimum) if level in LEVELS else True


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _clean(text: str, limit: int) -> str:
    """Storable text: valid UTF-8 (lone surrogates replaced), no NUL (PostgreSQL refuses it)."""
    return text[:limit].encode("utf-8", "replace").decode("utf-8").replace("\x00", "\ufffd")


def _entry(
    sandbox_id: str,
    time_ms: int,
    level: str,
    message: str,
    fields: Mapping[str, str],
    guest_seq: int | None,
) -> NewLogEntry:
    size = len(message) + sum(len(k) + len(v) for k, v in fields.items()) + _ENTRY_OVERHEAD
    return NewLogEntry(sandbox_id, time_ms, level, message, dict(fields), size, guest_seq)


def _guest_entry(
    sandbox_id: str, raw: object, after: int, now_ms: int, floor_ms: int
) -> NewLogEntry | None:
    """One checked entry from the guest's ``[seq, time, level, event, pid, stream, message,
    fields]``, or None."""
    if not isinstance(raw, list) or len(raw) != 8:
        return None
    seq, at, level, event, pid, stream, message, extra = raw
    if not _is_int(seq) or seq <= after:
        return None
    if not isinstance(at, int | float) or isinstance(at, bool) or not math.isfinite(at):
        return None
    if level not in LEVELS or event not in _PROCESS_EVENTS or not _is_int(pid):
        return None
    if stream is not None and stream not in _STREAMS:
        return None
    if not isinstance(message, str) or not (extra is None or isinstance(extra, dict)):
        return None
    fields = {"logger": "processSvc", "event_type": event, "pid": str(pid)}
    if stream is not None:
        fields["stream"] = stream
    for key, value in (extra or {}).items():
        if len(fields) >= _MAX_FIELDS:
            break
        if not isinstance(key, str) or key in _RESERVED or not key.isidentifier():
            continue
        if isinstance(value, bool):
            text = "true" if value else "false"
        elif isinstance(value, str | int) or (isinstance(value, float) and math.isfinite(value)):
            text = str(value)
        else:
            continue
        fields[_clean(key, 64)] = _clean(text, _MAX_FIELD)
    time_ms = min(max(int(at * 1000), floor_ms), now_ms)
    return _entry(sandbox_id, time_ms, level, _clean(message, _MAX_MESSAGE), fields, seq)
