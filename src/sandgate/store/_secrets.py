"""Durable records of team secrets (``secrets.team`` owns what they mean; this module only
keeps rows). Kept beside ``_store.py`` so each reads on one screen."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sqlalchemy import func, select
from sqlalchemy.exc import IntegrityError

from sandgate.errors import Conflict
from sandgate.store._store import Store
from sandgate.store.models import TeamSecret

__all__ = ["SecretRecords"]


class SecretRecords:
    def __init__(self, store: Store) -> None:
        self._store = store

    def add(self, row: TeamSecret) -> None:
        """Raises ``Conflict`` when the team already has a secret of that name."""
        try:
            with self._store.session() as s:
                s.add(row)
        except IntegrityError:
            raise Conflict(
                f"a secret named '{row.name}' already exists in your team; update it instead"
            ) from None

    def find(self, team_id: str, ref: str) -> TeamSecret | None:
        """The team's secret whose id or (canonical) name is ``ref``."""
        with self._store.session() as s:
            query = select(TeamSecret).where(
                TeamSecret.team_id == team_id,
                (TeamSecret.id == ref) | (TeamSecret.name == ref),
            )
            return s.scalar(query)

    def by_names(self, team_id: str, names: Sequence[str]) -> list[TeamSecret]:
        with self._store.session() as s:
            query = select(TeamSecret).where(
                TeamSecret.team_id == team_id, TeamSecret.name.in_(list(names))
            )
            return list(s.scalars(query))

    def update(self, secret_id: str, **values: Any) -> TeamSecret | None:
        with self._store.session() as s:
            row = s.get(TeamSecret, secret_id)
            if row is None:
                return None
            for name, value in values.items():
                setattr(row, name, value)
            return row

    def delete(self, secret_id: str) -> bool:
        with self._store.session() as s:
            row = s.get(TeamSecret, secret_id)
            if row is None:
                return False
            s.delete(row)
            return True

    def page(self, team_id: str, limit: int, after: str | None) -> list[TeamSecret]:
        """Up to ``limit`` secrets ordered by name, after the name ``after``."""
        with self._store.session() as s:
            query = select(TeamSecret).where(TeamSecret.team_id == team_id)
            if after is not None:
                query = query.where(TeamSecret.name > after)
            return list(s.scalars(query.order_by(TeamSecret.name).limit(limit)))

    def count(self, team_id: str) -> int:
        with self._store.session() as s:
            query = select(func.count()).select_from(TeamSecret)
            return int(s.scalar(query.where(TeamSecret.team_id == team_id)) or 0)
