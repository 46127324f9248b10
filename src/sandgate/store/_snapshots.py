"""Durable records of saved sandbox disks: snapshots, layers of sandboxes paused to disk, and
fork captures (``sandboxes.snapshots`` owns the files; these are only the rows).

Kept beside ``_store.py`` so each reads on one screen; services never see SQLAlchemy.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from sqlalchemy import ColumnElement, and_, bindparam, func, or_, select

from sandgate.store._store import Store
from sandgate.store.models import Snapshot

__all__ = ["SnapshotPage", "SnapshotRecords"]


# Run by every create (a template reference may name a snapshot) and every kill: built once
# (see _store.py).
_NAMED = select(Snapshot).where(
    Snapshot.team_id == bindparam("team_id"),
    Snapshot.kind == bindparam("kind"),
    Snapshot.name == bindparam("name"),
    Snapshot.tag == bindparam("tag"),
)
#: ``SnapshotService.resolve``'s candidates in one statement: the snapshot with the id, and
#: the team's of the kind carrying the name and tag.
_BY_ID_OR_NAME = select(Snapshot).where(
    (Snapshot.id == bindparam("name"))
    | (
        (Snapshot.team_id == bindparam("team_id"))
        & (Snapshot.kind == bindparam("kind"))
        & (Snapshot.name == bindparam("name"))
        & (Snapshot.tag == bindparam("tag"))
    )
)
_OF_SOURCE = select(Snapshot).where(
    Snapshot.source_sandbox_id == bindparam("sandbox_id"), Snapshot.kind == bindparam("kind")
)


class SnapshotPage:
    """One page of a team's snapshots, newest first, and the cursor of the next (or None)."""

    def __init__(self, snapshots: list[Snapshot], next_token: str | None) -> None:
        self.snapshots = snapshots
        self.next_token = next_token


class SnapshotRecords:
    def __init__(self, store: Store) -> None:
        self._store = store

    def add(self, snapshot: Snapshot) -> None:
        with self._store.session() as s:
            s.add(snapshot)

    def get(self, snapshot_id: str) -> Snapshot | None:
        with self._store.session() as s:
            return s.get(Snapshot, snapshot_id)

    def update(self, snapshot_id: str, **values: Any) -> Snapshot | None:
        with self._store.session() as s:
            row = s.get(Snapshot, snapshot_id)
            if row is None:
                return None
            for name, value in values.items():
                setattr(row, name, value)
            return row

    def delete(self, snapshot_id: str) -> None:
        with self._store.session() as s:
            row = s.get(Snapshot, snapshot_id)
            if row is not None:
                s.delete(row)

    def all(self) -> Sequence[Snapshot]:
        with self._store.session() as s:
            return s.scalars(select(Snapshot)).all()

    def named(self, team_id: str, kind: str, name: str, tag: str) -> Sequence[Snapshot]:
        """The team's snapshots of ``kind`` that carry ``name:tag`` (one, or none)."""
        with self._store.session() as s:
            params = {"team_id": team_id, "kind": kind, "name": name, "tag": tag}
            return s.scalars(_NAMED, params).all()

    def by_id_or_name(self, ref: str, team_id: str, kind: str, tag: str) -> Sequence[Snapshot]:
        """The snapshot whose id is ``ref`` (any team's, any kind: the caller checks) and the
        team's of ``kind`` named ``ref:tag``, in one statement (every create asks)."""
        with self._store.session() as s:
            params = {"name": ref, "team_id": team_id, "kind": kind, "tag": tag}
            return s.scalars(_BY_ID_OR_NAME, params).all()

    def of_source(self, sandbox_id: str, kind: str) -> Sequence[Snapshot]:
        with self._store.session() as s:
            return s.scalars(_OF_SOURCE, {"sandbox_id": sandbox_id, "kind": kind}).all()

    def bytes_used(self, team_id: str) -> int:
        """Everything the team's saved disks hold (every kind, saving ones at their
        estimate)."""
        with self._store.session() as s:
            query = select(func.sum(Snapshot.size_bytes)).where(Snapshot.team_id == team_id)
            return int(s.scalar(query) or 0)

    def page(
        self,
        team_id: str,
        kind: str,
        state: str,
        *,
        source_sandbox_id: str | None,
        names: Sequence[tuple[str | None, str | None]] | None,
        ids: Sequence[str] | None,
        limit: int,
        after: tuple[datetime, str] | None,
    ) -> SnapshotPage:
        """Newest first; ``after`` is the (created_at, id) of the prior page's last row.
        ``names`` ((name, tag or None) pairs) and ``ids`` together filter by identity: a row
        matches if either matches (None: no identity filter)."""
        with self._store.session() as s:
            query = (
                select(Snapshot)
                .where(Snapshot.team_id == team_id, Snapshot.kind == kind, Snapshot.state == state)
                .order_by(Snapshot.created_at.desc(), Snapshot.id.desc())
            )
            if source_sandbox_id is not None:
                query = query.where(Snapshot.source_sandbox_id == source_sandbox_id)
            if names is not None or ids is not None:
                wanted: list[ColumnElement[bool]] = [Snapshot.id.in_(list(ids or []))]
                for name, tag in names or []:
                    condition: ColumnElement[bool] = Snapshot.name == name
                    if tag is not None:
                        condition = and_(condition, Snapshot.tag == tag)
                    wanted.append(condition)
                query = query.where(or_(*wanted))
            if after is not None:
                created, last_id = after
                query = query.where(
                    (Snapshot.created_at < created)
                    | ((Snapshot.created_at == created) & (Snapshot.id < last_id))
                )
            rows = list(s.scalars(query.limit(limit + 1)))
        more = len(rows) > limit
        rows = rows[:limit]
        token = f"{rows[-1].created_at.isoformat()}|{rows[-1].id}" if more and rows else None
        return SnapshotPage(rows, token)
