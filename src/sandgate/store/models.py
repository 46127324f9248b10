"""Tables. Times are timezone-aware UTC; ids are random strings chosen by the services."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import (
    JSON,
    BigInteger,
    DateTime,
    ForeignKey,
    Index,
    Integer,
    String,
    Text,
    false,
    true,
)
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column
from sqlalchemy.types import TypeDecorator


class UTCDateTime(TypeDecorator[datetime]):
    """Stores UTC and always hands back aware datetimes (SQLite forgets the zone)."""

    impl = DateTime(timezone=True)
    cache_ok = True

    def process_result_value(self, value: Any, dialect: Any) -> datetime | None:
        if value is None:
            return None
        if isinstance(value, datetime) and value.tzinfo is None:
            from datetime import UTC

            return value.replace(tzinfo=UTC)
        return value  # type: ignore[no-any-return]


class Base(DeclarativeBase):
    type_annotation_map = {dict[str, Any]: JSON, datetime: UTCDateTime}


class Team(Base):
    __tablename__ = "teams"

    id: Mapped[str] = mapped_column(String(64), primary_key=True)
    name: Mapped[str] = mapped_column(String(200), unique=True)
    created_at: Mapped[datetime]


class ApiKey(Base):
    """An API key; only its SHA-256 is kept, plus a short prefix to recognise it by."""

    __tablename__ = "api_keys"

    id: Mapped[str] = mapped_column(String(64), primary_key=True)
    team_id: Mapped[str] = mapped_column(ForeignKey("teams.id"))
    name: Mapped[str] = mapped_column(String(200))
    prefix: Mapped[str] = mapped_column(String(16))
    key_hash: Mapped[str] = mapped_column(String(64), unique=True)
    created_at: Mapped[datetime]
    revoked_at: Mapped[datetime | None]
    last_used_at: Mapped[datetime | None]


class Template(Base):
    __tablename__ = "templates"

    id: Mapped[str] = mapped_column(String(64), primary_key=True)
    name: Mapped[str] = mapped_column(String(200), unique=True)
    image_ref: Mapped[str] = mapped_column(String(500))
    image_id: Mapped[str] = mapped_column(String(200))
    digest: Mapped[str] = mapped_column(String(128))
    envd_version: Mapped[str] = mapped_column(String(32))
    cpu_count: Mapped[int] = mapped_column(Integer)
    memory_mb: Mapped[int] = mapped_column(Integer)
    #: Started (``bash -l -c``, as the default user) once the guest is up, e.g. a kernel server.
    start_cmd: Mapped[str | None] = mapped_column(Text)
    #: A port inside the sandbox that must accept connections before create returns.
    ready_port: Mapped[int | None] = mapped_column(Integer)
    public: Mapped[bool]
    created_at: Mapped[datetime]
    updated_at: Mapped[datetime]


class Sandbox(Base):
    """One sandbox. ``runtime_ref`` names the runtime's handle (a container id)."""

    __tablename__ = "sandboxes"
    __table_args__ = (Index("ix_sandboxes_team_state", "team_id", "state"),)

    id: Mapped[str] = mapped_column(String(64), primary_key=True)
    team_id: Mapped[str] = mapped_column(ForeignKey("teams.id"))
    api_key_id: Mapped[str | None] = mapped_column(String(64))
    template_id: Mapped[str] = mapped_column(String(64))
    alias: Mapped[str | None] = mapped_column(String(200))
    state: Mapped[str] = mapped_column(String(16))
    runtime: Mapped[str] = mapped_column(String(32))
    runtime_ref: Mapped[str | None] = mapped_column(String(200))
    access_token: Mapped[str] = mapped_column(String(128))
    metadata_: Mapped[dict[str, Any]] = mapped_column("metadata", JSON)
    cpu_count: Mapped[int] = mapped_column(Integer)
    memory_mb: Mapped[int] = mapped_column(Integer)
    disk_size_mb: Mapped[int] = mapped_column(Integer)
    envd_version: Mapped[str] = mapped_column(String(32))
    allow_internet_access: Mapped[bool]
    #: The create call's egress request, ``{"allow_out": [...], "deny_out": [...]}`` or None.
    network: Mapped[dict[str, Any] | None] = mapped_column(JSON, nullable=True, default=None)
    started_at: Mapped[datetime]
    end_at: Mapped[datetime]
    ended_at: Mapped[datetime | None]
    #: The template image the sandbox's root is a layer over (a snapshot of it, or the sandbox
    #: paused to disk, comes back over the same tree even after the template is rebuilt).
    image_ref: Mapped[str | None] = mapped_column(String(500), nullable=True, default=None)
    #: The create call's timeout, given again to a sandbox resumed by traffic (auto_resume).
    timeout_s: Mapped[int | None] = mapped_column(Integer, nullable=True, default=None)
    #: What the reaper does at ``end_at``: "kill" or "pause" (E2B ``lifecycle.on_timeout``).
    on_timeout: Mapped[str] = mapped_column(String(8), default="kill", server_default="kill")
    #: With ``on_timeout == "pause"``: keep memory (freeze) or only the disk (E2B
    #: ``autoPauseMemory``).
    auto_pause_memory: Mapped[bool] = mapped_column(default=True, server_default=true())
    #: A paused sandbox resumes on the next data-plane request that carries its token.
    auto_resume: Mapped[bool] = mapped_column(default=False, server_default=false())


class Snapshot(Base):
    """A saved sandbox disk under ``<home>/snapshots/<id>/`` (``sandboxes.snapshots``).

    ``kind``: ``snapshot`` (the E2B API's, listed and restorable), ``pause`` (the layer of a
    sandbox paused to disk, until it resumes or is killed) or ``fork`` (one capture shared by
    the sandboxes of a fork call, removed once they started). ``state`` is a
    ``SnapshotState``. ``size_bytes`` is what it holds on disk, counted against the team's
    ``limits.max_snapshot_mib_per_team``.
    """

    __tablename__ = "snapshots"
    __table_args__ = (
        Index("ix_snapshots_team_kind", "team_id", "kind"),
        Index("ix_snapshots_source", "source_sandbox_id"),
    )

    id: Mapped[str] = mapped_column(String(64), primary_key=True)
    team_id: Mapped[str] = mapped_column(ForeignKey("teams.id"))
    kind: Mapped[str] = mapped_column(String(16))
    state: Mapped[str] = mapped_column(String(16))
    #: The name given at capture (E2B ``create_snapshot(name=...)``) and its tag.
    name: Mapped[str | None] = mapped_column(String(200), nullable=True)
    tag: Mapped[str | None] = mapped_column(String(100), nullable=True)
    source_sandbox_id: Mapped[str] = mapped_column(String(64))
    template_id: Mapped[str] = mapped_column(String(64))
    image_ref: Mapped[str] = mapped_column(String(500))
    cpu_count: Mapped[int] = mapped_column(Integer)
    memory_mb: Mapped[int] = mapped_column(Integer)
    size_bytes: Mapped[int] = mapped_column(BigInteger)
    created_at: Mapped[datetime]


class AuditEntry(Base):
    """The store's index of the audit log (``audit/audit.jsonl`` is the record of truth).

    One row per audit record, for queries; ``hash`` is the record's chain hash, so the index
    is also a second witness: ``audit verify`` notices records cut from the end of the file.
    """

    __tablename__ = "audit_entries"
    __table_args__ = (
        Index("ix_audit_tool_outcome", "tool", "outcome"),
        Index("ix_audit_sandbox", "sandbox_id"),
    )

    seq: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=False)
    time: Mapped[datetime]
    event: Mapped[str] = mapped_column(String(32))
    sandbox_id: Mapped[str | None] = mapped_column(String(64))
    team_id: Mapped[str | None] = mapped_column(String(64))
    agent: Mapped[str | None] = mapped_column(String(100))
    tool: Mapped[str | None] = mapped_column(String(200))
    action: Mapped[str | None] = mapped_column(String(200))
    outcome: Mapped[str] = mapped_column(String(32))
    rule_id: Mapped[str | None] = mapped_column(String(100))
    duration_ms: Mapped[float | None]
    hash: Mapped[str] = mapped_column(String(64))


# -- agent runner (agents/) ----------------------------------------------------------------


class AgentSession(Base):
    """A conversation with one agent: its messages so far and the sandbox it acts in."""

    __tablename__ = "agent_sessions"

    id: Mapped[str] = mapped_column(String(64), primary_key=True)
    agent_id: Mapped[str] = mapped_column(String(100))
    team_id: Mapped[str] = mapped_column(String(64))
    api_key_id: Mapped[str | None] = mapped_column(String(64))
    sandbox_id: Mapped[str | None] = mapped_column(String(64))
    #: Provider-neutral messages (``agents.providers.Message.as_dict``), oldest first.
    messages: Mapped[list[Any]] = mapped_column(JSON)
    created_at: Mapped[datetime]
    updated_at: Mapped[datetime]


class AgentRun(Base):
    """One message handled by an agent, from queued to a final state (``agents.RunState``)."""

    __tablename__ = "agent_runs"
    __table_args__ = (Index("ix_agent_runs_session_state", "session_id", "state"),)

    id: Mapped[str] = mapped_column(String(64), primary_key=True)
    session_id: Mapped[str] = mapped_column(String(64))
    agent_id: Mapped[str] = mapped_column(String(100))
    team_id: Mapped[str] = mapped_column(String(64))
    state: Mapped[str] = mapped_column(String(16))
    message: Mapped[str] = mapped_column(Text)
    answer: Mapped[str | None] = mapped_column(Text)
    #: Why the run ended: final_answer, max_steps, max_tokens, wall_clock, max_tool_calls,
    #: repeated_action, or an error code.
    stop_reason: Mapped[str | None] = mapped_column(String(64))
    error: Mapped[str | None] = mapped_column(Text)
    steps: Mapped[int] = mapped_column(Integer, default=0)
    model_calls: Mapped[int] = mapped_column(Integer, default=0)
    prompt_tokens: Mapped[int] = mapped_column(Integer, default=0)
    completion_tokens: Mapped[int] = mapped_column(Integer, default=0)
    tool_calls: Mapped[int] = mapped_column(Integer, default=0)
    created_at: Mapped[datetime]
    ended_at: Mapped[datetime | None]


class AgentRunEvent(Base):
    """The trace of a run, one row per event; the SSE stream replays these."""

    __tablename__ = "agent_run_events"
    __table_args__ = (Index("ix_agent_run_events_run", "run_id", "seq"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    run_id: Mapped[str] = mapped_column(String(64))
    seq: Mapped[int] = mapped_column(Integer)
    type: Mapped[str] = mapped_column(String(32))
    data: Mapped[dict[str, Any]] = mapped_column(JSON)
    time: Mapped[datetime]
