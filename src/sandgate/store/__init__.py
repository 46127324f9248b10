"""Durable state: SQLAlchemy 2 models and Alembic migrations; SQLite or PostgreSQL."""

from sandgate.store._store import LIVE_STATES, SandboxPage, Store
from sandgate.store.models import ApiKey, AuditEntry, Sandbox, Team, Template

__all__ = [
    "LIVE_STATES",
    "ApiKey",
    "AuditEntry",
    "Sandbox",
    "SandboxPage",
    "Store",
    "Team",
    "Template",
]
