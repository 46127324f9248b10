"""Durable state: SQLAlchemy 2 models and Alembic migrations; SQLite or PostgreSQL."""

from sandgate.store._agents import ACTIVE_RUN_STATES, AgentRecords
from sandgate.store._snapshots import SnapshotPage, SnapshotRecords
from sandgate.store._store import KEPT_STATES, LIVE_STATES, SandboxPage, Store
from sandgate.store.models import (
    AgentRun,
    AgentRunEvent,
    AgentSession,
    ApiKey,
    AuditEntry,
    Sandbox,
    Snapshot,
    Team,
    Template,
)

__all__ = [
    "ACTIVE_RUN_STATES",
    "KEPT_STATES",
    "LIVE_STATES",
    "AgentRecords",
    "AgentRun",
    "AgentRunEvent",
    "AgentSession",
    "ApiKey",
    "AuditEntry",
    "Sandbox",
    "SandboxPage",
    "Snapshot",
    "SnapshotPage",
    "SnapshotRecords",
    "Store",
    "Team",
    "Template",
]
