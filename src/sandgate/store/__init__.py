"""Durable state: SQLAlchemy 2 models and Alembic migrations; SQLite or PostgreSQL."""

from sandgate.store._agents import ACTIVE_RUN_STATES, AgentRecords
from sandgate.store._store import LIVE_STATES, SandboxPage, Store
from sandgate.store._templates import TemplateRecords
from sandgate.store._workflows import WorkflowRecords
from sandgate.store.models import (
    AgentRun,
    AgentRunEvent,
    AgentSession,
    ApiKey,
    AuditEntry,
    Sandbox,
    Team,
    Template,
    TemplateBuild,
    TemplateBuildLog,
    TemplateTag,
)
from sandgate.store.workflow_models import (
    WorkflowDefinition,
    WorkflowEvent,
    WorkflowRun,
    WorkflowStepRecord,
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
    "SandboxPage",
    "Store",
    "Team",
    "Template",
    "TemplateBuild",
    "TemplateBuildLog",
    "TemplateRecords",
    "TemplateTag",
    "WorkflowDefinition",
    "WorkflowEvent",
    "WorkflowRecords",
    "WorkflowRun",
    "WorkflowStepRecord",
]
