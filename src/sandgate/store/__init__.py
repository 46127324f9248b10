"""Durable state: SQLAlchemy 2 models and Alembic migrations; SQLite or PostgreSQL."""

from sandgate.store._agents import ACTIVE_RUN_STATES, AgentRecords
from sandgate.store._store import LIVE_STATES, SandboxPage, Store
from sandgate.store._telemetry import TelemetryRecords
from sandgate.store.models import (
    AgentRun,
    AgentRunEvent,
    AgentSession,
    ApiKey,
    AuditEntry,
    Sandbox,
    SandboxLogEntry,
    SandboxMetricSample,
    Team,
    Template,
)

__all__ = [
    "ACTIVE_RUN_STATES",
    "LIVE_STATES",
    "AgentRecords",
    "AgentRun",
    "AgentRunEvent",
    "AgentSession",
    "ApiKey",
    "AuditEntry",
    "Sandbox",
    "SandboxLogEntry",
    "SandboxMetricSample",
    "SandboxPage",
    "Store",
    "Team",
    "TelemetryRecords",
    "Template",
]
