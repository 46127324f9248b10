"""Durable records of volumes (``volumes`` owns what they mean; this module keeps rows) and
the query "which live sandboxes mount this volume"."""

from __future__ import annotations

from collections.abc import Sequence

from sqlalchemy import select
from sqlalchemy.exc import IntegrityError

from sandgate.errors import Conflict
from sandgate.store._store import KEPT_STATES, Store
from sandgate.store.models import Sandbox, Volume

__all__ = ["VolumeRecords"]


class VolumeRecords:
    def __init__(self, store: Store) -> None:
        self._store = store

    def add(self, row: Volume) -> None:
        """Raises ``Conflict`` when the team already has a volume of that name."""
        try:
            with self._store.session() as s:
                s.add(row)
        except IntegrityError:
            raise Conflict(
                f"a volume named '{row.name}' already exists in your team; connect to it "
                "(Volume.connect) or pick another name"
            ) from None

    def get(self, volume_id: str) -> Volume | None:
        with self._store.session() as s:
            return s.get(Volume, volume_id)

    def by_name(self, team_id: str, name: str) -> Volume | None:
        with self._store.session() as s:
            return s.scalar(select(Volume).where(Volume.team_id == team_id, Volume.name == name))

    def of_team(self, team_id: str) -> Sequence[Volume]:
        with self._store.session() as s:
            query = select(Volume).where(Volume.team_id == team_id).order_by(Volume.created_at)
            return s.scalars(query).all()

    def all(self) -> Sequence[Volume]:
        with self._store.session() as s:
            return s.scalars(select(Volume)).all()

    def delete(self, volume_id: str) -> None:
        with self._store.session() as s:
            row = s.get(Volume, volume_id)
            if row is not None:
                s.delete(row)

    def mounted_by(self, volume_id: str) -> list[str]:
        """Ids of the sandboxes that still exist (starting, running, paused, paused to disk)
        that mount the volume.
        Matched in Python: ``volume_mounts`` is a JSON column and live sandboxes are few."""
        with self._store.session() as s:
            rows = s.scalars(
                select(Sandbox).where(
                    Sandbox.state.in_(KEPT_STATES), Sandbox.volume_mounts.is_not(None)
                )
            ).all()
        return [
            row.id
            for row in rows
            if any(m.get("volume_id") == volume_id for m in row.volume_mounts or [])
        ]
