"""Tables of workflows (``sandgate.workflows``): definitions made through the API, runs,
steps and run events. Kept apart from ``models.py`` so each reads on one screen.

These are Sandgate's own records of a run, for ``show``, the API and SSE; DBOS keeps its
checkpoints in its own system database. Every write to them is idempotent (a state moves only
forward along ``workflows.state``'s transitions), so a run replayed after a crash rewrites
nothing it already wrote and adds no event twice.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import JSON, Index, Integer, String, Text
from sqlalchemy.orm import Mapped, mapped_column

from sandgate.store.models import Base

__all__ = ["WorkflowDefinition", "WorkflowEvent", "WorkflowRun", "WorkflowStepRecord"]


class WorkflowDefinition(Base):
    """A workflow a team defined through the HTTP API (config workflows are not stored)."""

    __tablename__ = "workflow_definitions"

    team_id: Mapped[str] = mapped_column(String(64), primary_key=True)
    name: Mapped[str] = mapped_column(String(64), primary_key=True)
    definition: Mapped[dict[str, Any]] = mapped_column(JSON)
    created_at: Mapped[datetime]
    updated_at: Mapped[datetime]


class WorkflowRun(Base):
    """One run of a workflow, from queued to a final state (``workflows.RunState``)."""

    __tablename__ = "workflow_runs"
    __table_args__ = (
        Index("ix_workflow_runs_team_created", "team_id", "created_at"),
        Index("ix_workflow_runs_state", "state"),
    )

    id: Mapped[str] = mapped_column(String(64), primary_key=True)
    workflow: Mapped[str] = mapped_column(String(64))
    team_id: Mapped[str] = mapped_column(String(64))
    api_key_id: Mapped[str | None] = mapped_column(String(64))
    state: Mapped[str] = mapped_column(String(16))
    #: api, cli, schedule, tool (an agent's workflow_run call) or workflow (a child run).
    trigger: Mapped[str] = mapped_column(String(16))
    inputs: Mapped[dict[str, Any]] = mapped_column(JSON)
    #: The definition as it was when the run started (a run never changes workflow midway).
    definition: Mapped[dict[str, Any]] = mapped_column(JSON)
    output: Mapped[Any] = mapped_column(JSON, nullable=True)
    error: Mapped[str | None] = mapped_column(Text)
    error_code: Mapped[str | None] = mapped_column(String(64))
    #: The step the run stopped at, when one stopped it.
    failed_step: Mapped[str | None] = mapped_column(String(64))
    attempt: Mapped[int] = mapped_column(Integer, default=1)
    parent_run_id: Mapped[str | None] = mapped_column(String(64))
    tool_calls: Mapped[int] = mapped_column(Integer, default=0)
    tokens: Mapped[int] = mapped_column(Integer, default=0)
    created_at: Mapped[datetime]
    started_at: Mapped[datetime | None]
    ended_at: Mapped[datetime | None]
    #: When the run times out (``timeout_s`` after it started).
    deadline_at: Mapped[datetime]


class WorkflowStepRecord(Base):
    """One step of a run (``workflows.StepState``); ``output`` is kept for ``retry``."""

    __tablename__ = "workflow_steps"

    run_id: Mapped[str] = mapped_column(String(64), primary_key=True)
    step_id: Mapped[str] = mapped_column(String(64), primary_key=True)
    kind: Mapped[str] = mapped_column(String(16))
    state: Mapped[str] = mapped_column(String(16))
    #: The run attempt that last moved this step.
    attempt: Mapped[int] = mapped_column(Integer, default=1)
    position: Mapped[int] = mapped_column(Integer, default=0)
    depends_on: Mapped[list[Any]] = mapped_column(JSON)
    started_at: Mapped[datetime | None]
    ended_at: Mapped[datetime | None]
    output: Mapped[Any] = mapped_column(JSON, nullable=True)
    summary: Mapped[str | None] = mapped_column(Text)
    error: Mapped[str | None] = mapped_column(Text)
    error_code: Mapped[str | None] = mapped_column(String(64))
    #: for_each: elements in all and done; outputs of the done ones by index (for retry).
    items_total: Mapped[int | None] = mapped_column(Integer)
    items_done: Mapped[int] = mapped_column(Integer, default=0)
    item_outputs: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)
    #: What the step is waiting on or ran in (an approval, a sandbox, a child run, an agent run).
    detail: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)


class WorkflowEvent(Base):
    """A run's events, in order (``id`` is the SSE event id); the SSE stream replays them."""

    __tablename__ = "workflow_events"
    __table_args__ = (Index("ix_workflow_events_run", "run_id", "id"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    run_id: Mapped[str] = mapped_column(String(64))
    type: Mapped[str] = mapped_column(String(32))
    data: Mapped[dict[str, Any]] = mapped_column(JSON)
    time: Mapped[datetime]
