"""Durable records of sandbox telemetry: metric samples and log entries (``telemetry/``).

Kept beside ``_store.py`` so each reads on one screen; the telemetry service calls these
methods (from a worker thread: they block) and never sees SQLAlchemy. Every table here is
bounded: samples by age, log entries by a ring per sandbox, by age and by a cap on the table's
total size (``prune_logs``).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime
from typing import Any, NamedTuple, cast

from sqlalchemy import Integer, Table, bindparam, delete, func, insert, select, union_all
from sqlalchemy.orm import Session

from sandgate.store._store import KEPT_STATES, Store
from sandgate.store.models import Sandbox, SandboxLogEntry, SandboxMetricSample

__all__ = ["NewLogEntry", "SamplePoint", "TelemetryRecords"]

#: Rows read per round while looking for the cut of the size cap.
_PRUNE_BATCH = 5000


class SamplePoint(NamedTuple):
    """The few columns of a metric sample a sparkline draws. A list page reads thousands of
    them at once, and plain rows cost a fraction of mapped objects."""

    time_ms: int
    cpu_used_pct: float
    mem_used: int
    mem_total: int


class NewLogEntry(NamedTuple):
    """A log entry to store. The collector writes one per process start, output line and
    end, so entries go in as plain rows in one statement: a mapped object costs several times
    as much to make and to flush (``bench/sandbox_logs.py``)."""

    sandbox_id: str
    time_ms: int
    level: str
    message: str
    fields: Mapping[str, str]
    size: int
    guest_seq: int | None

    def row(self) -> dict[str, Any]:
        return {**self._asdict(), "fields": dict(self.fields)}


class TelemetryRecords:
    def __init__(self, store: Store) -> None:
        self._store = store

    # -- team metrics ---------------------------------------------------------------------

    def lifetimes(
        self, team_id: str, start: datetime, end: datetime
    ) -> list[tuple[datetime, datetime | None]]:
        """(started, ended or None) of the team's sandboxes that existed at some moment of
        ``[start, end]``: the sandboxes table keeps ended rows, so this is the team's
        history (E2B's team metrics are computed from it).

        Two ranges of ``ix_sandboxes_team_ended``, not one condition with an OR: with the OR,
        SQLite and PostgreSQL both read every row of the team's history and filter."""
        alive_before_end = (Sandbox.team_id == team_id) & (Sandbox.started_at <= end)
        ended_in_window = select(Sandbox.started_at, Sandbox.ended_at).where(
            alive_before_end, Sandbox.ended_at >= start
        )
        # An ended row without its end time (none is written so) is not counted.
        kept = select(Sandbox.started_at, Sandbox.ended_at).where(
            alive_before_end, Sandbox.ended_at.is_(None), Sandbox.state.in_(KEPT_STATES)
        )
        with self._store.session() as s:
            rows = s.execute(union_all(ended_in_window, kept)).all()
            return [(row[0], row[1]) for row in rows]

    # -- metrics --------------------------------------------------------------------------

    def add_samples(self, samples: Iterable[SandboxMetricSample]) -> None:
        """Adds one batch in one transaction."""
        with self._store.session() as s:
            s.add_all(list(samples))

    def samples(
        self, sandbox_id: str, start_ms: int, end_ms: int, limit: int
    ) -> Sequence[SandboxMetricSample]:
        """Oldest first, ``start_ms <= time_ms <= end_ms``, at most ``limit``."""
        with self._store.session() as s:
            query = (
                select(SandboxMetricSample)
                .where(
                    SandboxMetricSample.sandbox_id == sandbox_id,
                    SandboxMetricSample.time_ms >= start_ms,
                    SandboxMetricSample.time_ms <= end_ms,
                )
                .order_by(SandboxMetricSample.time_ms, SandboxMetricSample.id)
                .limit(limit)
            )
            return s.scalars(query).all()

    def count_samples(self, sandbox_id: str, start_ms: int, end_ms: int) -> int:
        with self._store.session() as s:
            query = select(func.count()).where(
                SandboxMetricSample.sandbox_id == sandbox_id,
                SandboxMetricSample.time_ms >= start_ms,
                SandboxMetricSample.time_ms <= end_ms,
            )
            return int(s.scalar(query) or 0)

    def latest_samples(self, sandbox_ids: Sequence[str]) -> dict[str, SandboxMetricSample]:
        """The newest sample of each of ``sandbox_ids`` that has one."""
        if not sandbox_ids:
            return {}
        with self._store.session() as s:
            newest = (
                select(
                    SandboxMetricSample.sandbox_id,
                    func.max(SandboxMetricSample.time_ms).label("time_ms"),
                )
                .where(SandboxMetricSample.sandbox_id.in_(list(sandbox_ids)))
                .group_by(SandboxMetricSample.sandbox_id)
                .subquery()
            )
            query = select(SandboxMetricSample).join(
                newest,
                (SandboxMetricSample.sandbox_id == newest.c.sandbox_id)
                & (SandboxMetricSample.time_ms == newest.c.time_ms),
            )
            return {row.sandbox_id: row for row in s.scalars(query)}

    def recent_samples(
        self, sandbox_ids: Sequence[str], since_ms: int
    ) -> dict[str, list[SamplePoint]]:
        """Each of ``sandbox_ids``' samples from ``since_ms`` on, oldest first, in one query
        (the console's sparklines for a whole list); sandboxes without any are left out."""
        if not sandbox_ids:
            return {}
        found: dict[str, list[SamplePoint]] = {}
        with self._store.session() as s:
            query = (
                select(
                    SandboxMetricSample.sandbox_id,
                    SandboxMetricSample.time_ms,
                    SandboxMetricSample.cpu_used_pct,
                    SandboxMetricSample.mem_used,
                    SandboxMetricSample.mem_total,
                )
                .where(
                    SandboxMetricSample.sandbox_id.in_(list(sandbox_ids)),
                    SandboxMetricSample.time_ms >= since_ms,
                )
                .order_by(SandboxMetricSample.time_ms, SandboxMetricSample.id)
            )
            for sandbox_id, time_ms, cpu, mem_used, mem_total in s.execute(query):
                found.setdefault(sandbox_id, []).append(
                    SamplePoint(time_ms, cpu, mem_used, mem_total)
                )
        return found

    def prune_samples(self, before_ms: int) -> int:
        """Deletes samples older than ``before_ms``; returns how many."""
        with self._store.session() as s:
            result = s.execute(
                delete(SandboxMetricSample).where(SandboxMetricSample.time_ms < before_ms)
            )
            return int(getattr(result, "rowcount", 0) or 0)

    # -- logs -----------------------------------------------------------------------------

    def add_log_entries(self, entries: Sequence[NewLogEntry], ring: int) -> None:
        """Adds ``entries`` (in one transaction, in their order) and trims each sandbox they
        belong to back to its newest ``ring`` entries."""
        if not entries:
            return
        with self._store.session() as s:
            s.execute(_INSERT, [entry.row() for entry in entries])
            for sandbox_id in {entry.sandbox_id for entry in entries}:
                _trim(s, sandbox_id, ring)

    def log_entries(
        self,
        sandbox_id: str,
        *,
        start_ms: int | None = None,
        end_ms: int | None = None,
        newest_first: bool = False,
        limit: int,
    ) -> Sequence[SandboxLogEntry]:
        """Entries of ``sandbox_id`` with ``start_ms <= time_ms <= end_ms`` (bounds optional),
        oldest first unless ``newest_first``; ties keep the order they were written in."""
        with self._store.session() as s:
            query = select(SandboxLogEntry).where(SandboxLogEntry.sandbox_id == sandbox_id)
            if start_ms is not None:
                query = query.where(SandboxLogEntry.time_ms >= start_ms)
            if end_ms is not None:
                query = query.where(SandboxLogEntry.time_ms <= end_ms)
            if newest_first:
                query = query.order_by(SandboxLogEntry.time_ms.desc(), SandboxLogEntry.id.desc())
            else:
                query = query.order_by(SandboxLogEntry.time_ms, SandboxLogEntry.id)
            return s.scalars(query.limit(limit)).all()

    def last_guest_seq(self, sandbox_id: str) -> int:
        """The highest guest sequence number stored for ``sandbox_id`` (0: none)."""
        with self._store.session() as s:
            query = select(func.max(SandboxLogEntry.guest_seq)).where(
                SandboxLogEntry.sandbox_id == sandbox_id
            )
            return int(s.scalar(query) or 0)

    def prune_logs(self, before_ms: int, max_total_bytes: int) -> int:
        """Deletes entries older than ``before_ms``, then the oldest entries of any sandbox
        until the table holds at most ``max_total_bytes``; returns how many went.

        Three transactions, not one: the table's size is summed over every row, and a write
        transaction holds the database's write lock (every create, kill and audit record
        waits) while it reads; the sum is read on its own, the write lock taken only to delete.
        Entries written meanwhile count at the next prune."""
        with self._store.session() as s:
            result = s.execute(delete(SandboxLogEntry).where(SandboxLogEntry.time_ms < before_ms))
            removed = int(getattr(result, "rowcount", 0) or 0)
        excess = self.log_bytes() - max_total_bytes
        if excess <= 0:
            return removed
        with self._store.session() as s:
            cut = _size_cut(s, excess)
        with self._store.session() as s:
            result = s.execute(delete(SandboxLogEntry).where(SandboxLogEntry.id <= cut))
            return removed + int(getattr(result, "rowcount", 0) or 0)

    def log_bytes(self) -> int:
        """The table's total size as counted by ``prune_logs``."""
        with self._store.session() as s:
            return int(s.scalar(select(func.coalesce(func.sum(SandboxLogEntry.size), 0))) or 0)


#: The collector writes a few entries at a time, often, so its statements are built once (an
#: expression built per call cost more than running it) and run on the table, not the mapper.
_ENTRIES = cast(Table, SandboxLogEntry.__table__)
_INSERT = insert(_ENTRIES)
#: The newest entry past the ring of a sandbox: it and everything older go.
_CUT = (
    select(_ENTRIES.c.time_ms, _ENTRIES.c.id)
    .where(_ENTRIES.c.sandbox_id == bindparam("sandbox_id"))
    .order_by(_ENTRIES.c.time_ms.desc(), _ENTRIES.c.id.desc())
    .offset(bindparam("ring", type_=Integer))
    .limit(1)
)
_BEFORE_CUT = delete(_ENTRIES).where(
    _ENTRIES.c.sandbox_id == bindparam("sandbox_id"),
    (_ENTRIES.c.time_ms < bindparam("time_ms"))
    | ((_ENTRIES.c.time_ms == bindparam("time_ms")) & (_ENTRIES.c.id <= bindparam("entry_id"))),
)


def _trim(s: Session, sandbox_id: str, ring: int) -> None:
    cut = s.execute(_CUT, {"sandbox_id": sandbox_id, "ring": ring}).first()
    if cut is None:
        return
    time_ms, entry_id = cut
    s.execute(_BEFORE_CUT, {"sandbox_id": sandbox_id, "time_ms": time_ms, "entry_id": entry_id})


def _size_cut(s: Session, excess: int) -> int:
    """The id up to which (in write order) the oldest entries add up to ``excess`` bytes."""
    after = 0
    while True:
        rows = s.execute(
            select(SandboxLogEntry.id, SandboxLogEntry.size)
            .where(SandboxLogEntry.id > after)
            .order_by(SandboxLogEntry.id)
            .limit(_PRUNE_BATCH)
        ).all()
        if not rows:
            return after
        for entry_id, size in rows:
            excess -= size
            after = entry_id
            if excess <= 0:
                return after
