"""Durable state: SQLAlchemy 2 models and Alembic migrations; SQLite or PostgreSQL."""

from sandgate.store._agents import ACTIVE_RUN_STATES, AgentRecords
from sandgate.store._channels import ChannelRecords
from sandgate.store._secrets import SecretRecords
from sandgate.store._snapshots import SnapshotPage, SnapshotRecords
from sandgate.store._store import KEPT_STATES, LIVE_STATES, AuditIndexer, SandboxPage, Store
from sandgate.store._telemetry import NewLogEntry, SamplePoint, TelemetryRecords
from sandgate.store._templates import TemplateRecords
from sandgate.store._volumes import VolumeRecords
from sandgate.store._workflows import WorkflowRecords
from sandgate.store.models import (
    AgentRun,
    AgentRunEvent,
    AgentSession,
    ApiKey,
    AuditEntry,
    ChannelChat,
    ChannelCursor,
    Sandbox,
    SandboxLogEntry,
    SandboxMetricSample,
    Snapshot,
    Team,
    TeamSecret,
    Template,
    TemplateBuild,
    TemplateBuildLog,
    TemplateTag,
    Volume,
)
from sandgate.store.workflow_models import (
    WorkflowDefinition,
    WorkflowEvent,
    WorkflowRun,
    WorkflowStepRecord,
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
    "AuditIndexer",
    "ChannelChat",
    "ChannelCursor",
    "ChannelRecords",
    "NewLogEntry",
    "SamplePoint",
    "Sandbox",
    "SandboxLogEntry",
    "SandboxMetricSample",
    "SandboxPage",
    "SecretRecords",
    "Snapshot",
    "SnapshotPage",
    "SnapshotRecords",
    "Store",
    "Team",
    "TeamSecret",
    "TelemetryRecords",
    "Template",
    "TemplateBuild",
    "TemplateBuildLog",
    "TemplateRecords",
    "TemplateTag",
    "Volume",
    "VolumeRecords",
    "WorkflowDefinition",
    "WorkflowEvent",
    "WorkflowRecords",
    "WorkflowRun",
    "WorkflowStepRecord",
]
