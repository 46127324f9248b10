"""Durable records of the agent runner: sessions, runs and their traces.

Kept beside ``_store.py`` (which holds everything else) so each reads on one screen; the
runner calls these methods and never sees SQLAlchemy.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from sqlalchemy import func, select, update

from sandgate.store._store import Store
from sandgate.store.models import AgentRun, AgentRunEvent, AgentSession

__all__ = ["AgentRecords"]

#: Run states in which a run still holds its session.
ACTIVE_RUN_STATES = ("queued", "running")


class AgentRecords:
    def __init__(self, store: Store) -> None:
        self._store = store

    def add_session(self, session: AgentSession) -> None:
        with self._store.session() as s:
            s.add(session)

    def session(self, session_id: str) -> AgentSession | None:
        with self._store.session() as s:
            return s.get(AgentSession, session_id)

    def update_session(self, session_id: str, **values: Any) -> None:
        with self._store.session() as s:
            s.execute(update(AgentSession).where(AgentSession.id == session_id).values(**values))

    def start_run(self, run: AgentRun) -> bool:
        """Adds ``run`` unless its session already has an active run (then False)."""
        with self._store.session() as s:
            # Serialises concurrent starts on SQLite (one writer) and, via the row lock, on
            # PostgreSQL.
            s.execute(
                update(AgentSession)
                .where(AgentSession.id == run.session_id)
                .values(updated_at=run.created_at)
            )
            busy = s.scalar(
                select(func.count())
                .select_from(AgentRun)
                .where(AgentRun.session_id == run.session_id)
                .where(AgentRun.state.in_(ACTIVE_RUN_STATES))
            )
            if busy:
                return False
            s.add(run)
            return True

    def run(self, run_id: str) -> AgentRun | None:
        with self._store.session() as s:
            return s.get(AgentRun, run_id)

    def update_run(self, run_id: str, **values: Any) -> None:
        with self._store.session() as s:
            s.execute(update(AgentRun).where(AgentRun.id == run_id).values(**values))

    def runs(
        self,
        *,
        team_id: str | None = None,
        agent_id: str | None = None,
        states: Sequence[str] = (),
        since: datetime | None = None,
        until: datetime | None = None,
        limit: int = 50,
    ) -> Sequence[AgentRun]:
        """Newest first; ``since`` inclusive, ``until`` exclusive (creation time)."""
        with self._store.session() as s:
            query = select(AgentRun).order_by(AgentRun.created_at.desc(), AgentRun.id.desc())
            if team_id is not None:
                query = query.where(AgentRun.team_id == team_id)
            if agent_id is not None:
                query = query.where(AgentRun.agent_id == agent_id)
            if states:
                query = query.where(AgentRun.state.in_(states))
            if since is not None:
                query = query.where(AgentRun.created_at >= since)
            if until is not None:
                query = query.where(AgentRun.created_at < until)
            return s.scalars(query.limit(limit)).all()

    def request_cancel(self, run_id: str, *, by: str, at: datetime) -> bool:
        """Marks an active run for cancellation (whichever process runs it stops it); False
        when the run is not active."""
        with self._store.session() as s:
            changed = s.execute(
                update(AgentRun)
                .where(AgentRun.id == run_id, AgentRun.state.in_(ACTIVE_RUN_STATES))
                .where(AgentRun.cancel_requested_at.is_(None))
                .values(cancel_requested_at=at, cancelled_by=by)
                .returning(AgentRun.id)
            ).first()
            return changed is not None

    def cancel_requested(self, run_ids: Sequence[str]) -> Sequence[AgentRun]:
        """Those of ``run_ids`` that someone asked to cancel."""
        if not run_ids:
            return []
        with self._store.session() as s:
            query = select(AgentRun).where(
                AgentRun.id.in_(run_ids), AgentRun.cancel_requested_at.is_not(None)
            )
            return s.scalars(query).all()

    def active_runs(self) -> Sequence[AgentRun]:
        with self._store.session() as s:
            return s.scalars(select(AgentRun).where(AgentRun.state.in_(ACTIVE_RUN_STATES))).all()

    def has_active_run(self, session_id: str) -> bool:
        """Whether a run still holds ``session_id``: one session's runs, not every active run
        of the server."""
        with self._store.session() as s:
            query = select(AgentRun.id).where(
                AgentRun.session_id == session_id, AgentRun.state.in_(ACTIVE_RUN_STATES)
            )
            return s.scalar(query.limit(1)) is not None

    def add_event(
        self, run_id: str, seq: int, kind: str, data: dict[str, Any], at: datetime
    ) -> None:
        with self._store.session() as s:
            s.add(AgentRunEvent(run_id=run_id, seq=seq, type=kind, data=data, time=at))

    def events(self, run_id: str, after_seq: int = 0) -> Sequence[AgentRunEvent]:
        with self._store.session() as s:
            query = (
                select(AgentRunEvent)
                .where(AgentRunEvent.run_id == run_id, AgentRunEvent.seq > after_seq)
                .order_by(AgentRunEvent.seq)
            )
            return s.scalars(query).all()
