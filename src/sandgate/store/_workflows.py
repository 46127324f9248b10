"""Durable records of workflows: API definitions, runs, steps and run events.

Every state change goes through ``move_run``/``move_step``: inside one transaction the row is
read (locked on PostgreSQL), the move checked against ``workflows.state``'s table, and only a
move that changes something is written, together with its event. So a run replayed after a
crash, which asks again for moves it already made, changes nothing and adds no event twice.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import delete, func, select

from sandgate.store._store import Store
from sandgate.store.workflow_models import (
    WorkflowDefinition,
    WorkflowEvent,
    WorkflowRun,
    WorkflowStepRecord,
)

__all__ = ["WorkflowRecords"]

Moves = Mapping[Any, frozenset[Any]]


class WorkflowRecords:
    def __init__(
        self,
        store: Store,
        *,
        run_moves: Moves,
        step_moves: Moves,
        on_event: Callable[[str], None] | None = None,
    ) -> None:
        self._store = store
        self._run_moves = {str(k): {str(v) for v in vs} for k, vs in run_moves.items()}
        self._step_moves = {str(k): {str(v) for v in vs} for k, vs in step_moves.items()}
        self._on_event = on_event

    # -- definitions made through the API -------------------------------------------------

    def definition(self, team_id: str, name: str) -> WorkflowDefinition | None:
        with self._store.session() as s:
            return s.get(WorkflowDefinition, (team_id, name))

    def definitions(self, team_id: str) -> Sequence[WorkflowDefinition]:
        with self._store.session() as s:
            query = select(WorkflowDefinition).where(WorkflowDefinition.team_id == team_id)
            return s.scalars(query.order_by(WorkflowDefinition.name)).all()

    def count_definitions(self, team_id: str) -> int:
        with self._store.session() as s:
            query = select(func.count()).select_from(WorkflowDefinition)
            return int(s.scalar(query.where(WorkflowDefinition.team_id == team_id)) or 0)

    def put_definition(self, team_id: str, name: str, definition: dict[str, Any]) -> bool:
        """Creates or replaces; returns True when it was created."""
        now = datetime.now(UTC)
        with self._store.session() as s:
            row = s.get(WorkflowDefinition, (team_id, name))
            if row is None:
                s.add(
                    WorkflowDefinition(
                        team_id=team_id,
                        name=name,
                        definition=definition,
                        created_at=now,
                        updated_at=now,
                    )
                )
                return True
            row.definition, row.updated_at = definition, now
            return False

    def delete_definition(self, team_id: str, name: str) -> bool:
        with self._store.session() as s:
            result = s.execute(
                delete(WorkflowDefinition).where(
                    WorkflowDefinition.team_id == team_id, WorkflowDefinition.name == name
                )
            )
            return bool(getattr(result, "rowcount", 0))

    # -- runs -----------------------------------------------------------------------------

    def add_run(self, run: WorkflowRun, steps: Sequence[WorkflowStepRecord]) -> WorkflowRun:
        """Adds the run and its steps, unless a run with its id exists (then that one is
        returned unchanged): child runs have ids derived from their parent step."""
        with self._store.session() as s:
            existing = s.get(WorkflowRun, run.id)
            if existing is not None:
                return existing
            s.add(run)
            s.add_all(steps)
            s.add(
                _event(
                    run.id,
                    "run.queued",
                    {"run": run.id, "workflow": run.workflow, "state": run.state},
                )
            )
        self._notify(run.id)
        return run

    def run(self, run_id: str) -> WorkflowRun | None:
        with self._store.session() as s:
            return s.get(WorkflowRun, run_id)

    def runs(
        self,
        *,
        team_id: str | None = None,
        workflow: str | None = None,
        states: Sequence[str] | None = None,
        limit: int = 50,
    ) -> Sequence[WorkflowRun]:
        """Newest first."""
        with self._store.session() as s:
            query = select(WorkflowRun).order_by(WorkflowRun.created_at.desc()).limit(limit)
            if team_id is not None:
                query = query.where(WorkflowRun.team_id == team_id)
            if workflow is not None:
                query = query.where(WorkflowRun.workflow == workflow)
            if states is not None:
                query = query.where(WorkflowRun.state.in_(list(states)))
            return s.scalars(query).all()

    def steps(self, run_id: str) -> Sequence[WorkflowStepRecord]:
        with self._store.session() as s:
            query = select(WorkflowStepRecord).where(WorkflowStepRecord.run_id == run_id)
            return s.scalars(query.order_by(WorkflowStepRecord.position)).all()

    def step(self, run_id: str, step_id: str) -> WorkflowStepRecord | None:
        with self._store.session() as s:
            return s.get(WorkflowStepRecord, (run_id, step_id))

    def move_run(
        self, run_id: str, to: str, *, event: dict[str, Any] | None = None, **values: Any
    ) -> bool:
        """Moves the run to ``to`` (with ``values``) if the table allows it from where it
        is; returns whether it moved. Adds the event ``run.<to>``."""
        with self._store.session() as s:
            row = s.get(WorkflowRun, run_id, with_for_update=True)
            if row is None or to not in self._run_moves.get(row.state, set()):
                return False
            row.state = to
            for key, value in values.items():
                setattr(row, key, value)
            s.add(_event(run_id, f"run.{to}", {"run": run_id, "state": to, **(event or {})}))
        self._notify(run_id)
        return True

    def update_run(self, run_id: str, **values: Any) -> None:
        with self._store.session() as s:
            self._set_run(s, run_id, values)

    @staticmethod
    def _set_run(session: Any, run_id: str, values: dict[str, Any]) -> None:
        row = session.get(WorkflowRun, run_id, with_for_update=True)
        if row is not None:
            for key, value in values.items():
                setattr(row, key, value)

    def move_step(
        self,
        run_id: str,
        step_id: str,
        to: str,
        *,
        attempt: int,
        event: dict[str, Any] | None = None,
        run_values: dict[str, Any] | None = None,
        **values: Any,
    ) -> bool:
        """Moves a step to ``to`` if the table allows it and ``attempt`` is not older than
        the step's; returns whether it moved. Adds the event ``step.<to>``. ``run_values``
        are set on the run in the same transaction, whether or not the step moved."""
        with self._store.session() as s:
            if run_values:
                self._set_run(s, run_id, run_values)
            row = s.get(WorkflowStepRecord, (run_id, step_id), with_for_update=True)
            if row is None or attempt < row.attempt:
                return False
            if to not in self._step_moves.get(row.state, set()):
                return False
            row.state, row.attempt = to, attempt
            for key, value in values.items():
                setattr(row, key, value)
            data = {"run": run_id, "step": step_id, "state": to, "attempt": attempt}
            s.add(_event(run_id, f"step.{to}", {**data, **(event or {})}))
        self._notify(run_id)
        return True

    def item_done(
        self,
        run_id: str,
        step_id: str,
        index: int,
        output: Any,
        *,
        attempt: int,
        run_values: dict[str, Any] | None = None,
    ) -> bool:
        """Records a for_each element's output once; returns whether it was new."""
        key = str(index)
        with self._store.session() as s:
            if run_values:
                self._set_run(s, run_id, run_values)
            row = s.get(WorkflowStepRecord, (run_id, step_id), with_for_update=True)
            if row is None or attempt < row.attempt or key in (row.item_outputs or {}):
                return False
            row.item_outputs = {**(row.item_outputs or {}), key: output}
            row.items_done = len(row.item_outputs)
            s.add(
                _event(
                    run_id,
                    "step.item",
                    {
                        "run": run_id,
                        "step": step_id,
                        "index": index,
                        "done": row.items_done,
                        "total": row.items_total,
                    },
                )
            )
        self._notify(run_id)
        return True

    def update_step(self, run_id: str, step_id: str, **values: Any) -> None:
        with self._store.session() as s:
            row = s.get(WorkflowStepRecord, (run_id, step_id), with_for_update=True)
            if row is not None:
                for key, value in values.items():
                    setattr(row, key, value)

    def reset_for_retry(
        self, run_id: str, attempt: int, *, run_to: str, step_to: str, kept: Sequence[str]
    ) -> bool:
        """Moves a final, unsuccessful run back to ``run_to`` for ``attempt``, and every
        step not in a ``kept`` state back to ``step_to``; returns whether it moved."""
        with self._store.session() as s:
            row = s.get(WorkflowRun, run_id, with_for_update=True)
            if row is None or run_to not in self._run_moves.get(row.state, set()):
                return False
            row.state, row.attempt = run_to, attempt
            row.error = row.error_code = row.failed_step = None
            row.ended_at = None
            steps = s.scalars(
                select(WorkflowStepRecord).where(WorkflowStepRecord.run_id == run_id)
            ).all()
            for step in steps:
                if step.state in kept:
                    continue
                step.state, step.attempt = step_to, attempt
                step.error = step.error_code = None
                step.started_at = step.ended_at = None
            s.add(
                _event(
                    run_id,
                    f"run.{run_to}",
                    {"run": run_id, "state": run_to, "attempt": attempt, "retry": True},
                )
            )
        self._notify(run_id)
        return True

    # -- events ---------------------------------------------------------------------------

    def events(self, run_id: str, after_id: int = 0) -> Sequence[WorkflowEvent]:
        with self._store.session() as s:
            query = (
                select(WorkflowEvent)
                .where(WorkflowEvent.run_id == run_id, WorkflowEvent.id > after_id)
                .order_by(WorkflowEvent.id)
            )
            return s.scalars(query).all()

    def _notify(self, run_id: str) -> None:
        if self._on_event is not None:
            self._on_event(run_id)


def _event(run_id: str, kind: str, data: dict[str, Any]) -> WorkflowEvent:
    return WorkflowEvent(run_id=run_id, type=kind, data=data, time=datetime.now(UTC))
