"""Tables. Times are timezone-aware UTC; ids are random strings chosen by the services."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import (
    JSON,
    BigInteger,
    DateTime,
    Float,
    ForeignKey,
    Index,
    Integer,
    String,
    Text,
    UniqueConstraint,
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
    #: None: the key may do everything its team may. Otherwise a comma-separated list of
    #: scopes (``approvals``: list and decide the team's approvals, nothing else).
    scopes: Mapped[str | None] = mapped_column(String(200), default=None)


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
    #: The owning team; None for the shipped templates, which every team sees.
    team_id: Mapped[str | None] = mapped_column(String(64), default=None)
    #: The name the team gave it (``name`` is ``<team id>/<alias>``, unique); None: built in.
    alias: Mapped[str | None] = mapped_column(String(200), default=None)
    #: A shell command that must exit 0 before create returns (E2B's ``readyCmd``).
    ready_cmd: Mapped[str | None] = mapped_column(Text, default=None)
    #: The user and working directory commands get by default (the template's last
    #: ``set_user``/``set_workdir``); None: ``user`` and that user's home.
    default_user: Mapped[str | None] = mapped_column(String(64), default=None)
    default_workdir: Mapped[str | None] = mapped_column(String(1000), default=None)
    #: Environment variables every command in its sandboxes gets (the template's ``set_envs``).
    envs: Mapped[dict[str, Any] | None] = mapped_column(JSON, nullable=True, default=None)
    #: The build whose image sandboxes start from (a ``template_builds`` id); None until the
    #: first build of a team template is ready.
    build_id: Mapped[str | None] = mapped_column(String(64), default=None)
    spawn_count: Mapped[int] = mapped_column(Integer, default=0, server_default="0")
    last_spawned_at: Mapped[datetime | None] = mapped_column(default=None)

    @property
    def display_name(self) -> str:
        """The name users know it by: the alias of a team template, else the name."""
        return self.alias or self.name


class TemplateBuild(Base):
    """One build of a team template (``templates.builds.BuildState`` names the states)."""

    __tablename__ = "template_builds"
    __table_args__ = (Index("ix_template_builds_template", "template_id", "created_at"),)

    id: Mapped[str] = mapped_column(String(64), primary_key=True)
    template_id: Mapped[str] = mapped_column(String(64))
    team_id: Mapped[str] = mapped_column(String(64))
    state: Mapped[str] = mapped_column(String(16))
    cpu_count: Mapped[int] = mapped_column(Integer)
    memory_mb: Mapped[int] = mapped_column(Integer)
    #: Tags to point at this build once it is ready.
    tags: Mapped[list[Any]] = mapped_column(JSON)
    #: The build request (``TemplateBuildStartV2``) as received; None while waiting for it.
    spec: Mapped[dict[str, Any] | None] = mapped_column(JSON, default=None)
    engine: Mapped[str | None] = mapped_column(String(16), default=None)
    image_ref: Mapped[str | None] = mapped_column(String(500), default=None)
    image_id: Mapped[str | None] = mapped_column(String(200), default=None)
    start_cmd: Mapped[str | None] = mapped_column(Text, default=None)
    ready_cmd: Mapped[str | None] = mapped_column(Text, default=None)
    default_user: Mapped[str | None] = mapped_column(String(64), default=None)
    default_workdir: Mapped[str | None] = mapped_column(String(1000), default=None)
    envs: Mapped[dict[str, Any] | None] = mapped_column(JSON, nullable=True, default=None)
    #: Steps answered from the layer cache, of how many (shown in logs and `templates`).
    cached_steps: Mapped[int] = mapped_column(Integer, default=0, server_default="0")
    total_steps: Mapped[int] = mapped_column(Integer, default=0, server_default="0")
    reason: Mapped[str | None] = mapped_column(Text, default=None)
    #: The failed step as E2B names it: ``base``, the step's number, or ``finalize``.
    reason_step: Mapped[str | None] = mapped_column(String(32), default=None)
    created_at: Mapped[datetime]
    updated_at: Mapped[datetime]
    finished_at: Mapped[datetime | None] = mapped_column(default=None)


class TemplateBuildLog(Base):
    """One line of a build's log; ``seq`` counts from 0 per build (E2B's ``logsOffset``)."""

    __tablename__ = "template_build_logs"
    __table_args__ = (Index("ix_template_build_logs_build", "build_id", "seq", unique=True),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    build_id: Mapped[str] = mapped_column(String(64))
    seq: Mapped[int] = mapped_column(Integer)
    time: Mapped[datetime]
    level: Mapped[str] = mapped_column(String(8))
    step: Mapped[str | None] = mapped_column(String(32), default=None)
    message: Mapped[str] = mapped_column(Text)


class TemplateTag(Base):
    """A tag's assignment to a build; the assignment with ``removed_at`` None is current."""

    __tablename__ = "template_tags"
    __table_args__ = (Index("ix_template_tags_template_tag", "template_id", "tag"),)

    id: Mapped[str] = mapped_column(String(64), primary_key=True)
    template_id: Mapped[str] = mapped_column(String(64))
    tag: Mapped[str] = mapped_column(String(128))
    build_id: Mapped[str] = mapped_column(String(64))
    assigned_at: Mapped[datetime]
    removed_at: Mapped[datetime | None] = mapped_column(default=None)


class Sandbox(Base):
    """One sandbox. ``runtime_ref`` names the runtime's handle (a container id)."""

    __tablename__ = "sandboxes"
    __table_args__ = (
        Index("ix_sandboxes_team_state", "team_id", "state"),
        # Ended rows stay (the team's history), so what looks for live ones by state (the
        # reaper every second, the collectors, every create's server-wide count) needs this.
        Index("ix_sandboxes_state_end", "state", "end_at"),
        # A team's metrics read the sandboxes alive in a time window: those ended since its
        # start, and the kept ones (no end yet), not the team's whole history.
        Index("ix_sandboxes_team_ended", "team_id", "ended_at"),
    )

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
    #: Volumes mounted at create, ``[{"name", "path", "volume_id"}]`` (E2B ``volumeMounts``).
    volume_mounts: Mapped[list[Any] | None] = mapped_column(JSON, nullable=True, default=None)
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


class TeamSecret(Base):
    """A team's secret (E2B ``/secrets``). Only ciphertext is kept: AES-GCM under the
    install's key, bound to the row's team, id and version (``secrets.team``)."""

    __tablename__ = "team_secrets"
    __table_args__ = (UniqueConstraint("team_id", "name", name="uq_team_secrets_name"),)

    id: Mapped[str] = mapped_column(String(64), primary_key=True)
    team_id: Mapped[str] = mapped_column(ForeignKey("teams.id"))
    name: Mapped[str] = mapped_column(String(256))
    current_version: Mapped[int] = mapped_column(Integer)
    metadata_: Mapped[dict[str, Any]] = mapped_column("metadata", JSON)
    #: base64 of nonce + ciphertext + tag.
    ciphertext: Mapped[str] = mapped_column(Text)
    created_at: Mapped[datetime]
    updated_at: Mapped[datetime]


class Volume(Base):
    """A team's named persistent volume (E2B ``/volumes``): an ext4 image of ``size_mib``
    under the gateway's volumes directory, named by ``id``."""

    __tablename__ = "volumes"
    __table_args__ = (UniqueConstraint("team_id", "name", name="uq_volumes_name"),)

    id: Mapped[str] = mapped_column(String(64), primary_key=True)
    team_id: Mapped[str] = mapped_column(ForeignKey("teams.id"))
    name: Mapped[str] = mapped_column(String(128))
    size_mib: Mapped[int] = mapped_column(Integer)
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
        # A team's rows newest first (the console's search) or from a sequence number on
        # (/v1/audit), without walking every team's records.
        Index("ix_audit_team_seq", "team_id", "seq"),
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
    duration_ms: Mapped[float | None] = mapped_column(Float)
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
    #: Made for one run (no session id given): its sandbox is released when each run ends.
    ephemeral: Mapped[bool] = mapped_column(default=False, server_default=false())


class AgentRun(Base):
    """One message handled by an agent, from queued to a final state (``agents.RunState``)."""

    __tablename__ = "agent_runs"
    __table_args__ = (
        Index("ix_agent_runs_session_state", "session_id", "state"),
        Index("ix_agent_runs_team_created", "team_id", "created_at"),
        # Runs left active by a previous process, found at start among every run ever made.
        Index("ix_agent_runs_state", "state"),
    )

    id: Mapped[str] = mapped_column(String(64), primary_key=True)
    session_id: Mapped[str] = mapped_column(String(64))
    agent_id: Mapped[str] = mapped_column(String(100))
    team_id: Mapped[str] = mapped_column(String(64))
    state: Mapped[str] = mapped_column(String(16))
    message: Mapped[str] = mapped_column(Text)
    answer: Mapped[str | None] = mapped_column(Text)
    #: Why the run ended: final_answer, max_steps, max_tokens, wall_clock, budget_exceeded,
    #: repeated_action, cancelled, or an error code.
    stop_reason: Mapped[str | None] = mapped_column(String(64))
    error: Mapped[str | None] = mapped_column(Text)
    steps: Mapped[int] = mapped_column(Integer, default=0)
    model_calls: Mapped[int] = mapped_column(Integer, default=0)
    prompt_tokens: Mapped[int] = mapped_column(Integer, default=0)
    completion_tokens: Mapped[int] = mapped_column(Integer, default=0)
    tool_calls: Mapped[int] = mapped_column(Integer, default=0)
    created_at: Mapped[datetime]
    ended_at: Mapped[datetime | None]
    #: The sandbox the run acted in (once it has one).
    sandbox_id: Mapped[str | None] = mapped_column(String(64), default=None)
    #: Set by ``cancel`` (API or CLI, any process); the process running the run stops it.
    cancel_requested_at: Mapped[datetime | None] = mapped_column(default=None)
    cancelled_by: Mapped[str | None] = mapped_column(String(200), default=None)


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


# -- sandbox telemetry (telemetry/): E2B metrics and sandbox logs ---------------------------


class SandboxMetricSample(Base):
    """One sample of a running sandbox's resource use (E2B's ``SandboxMetric``); bytes and
    milliseconds since the epoch. Kept for ``metrics.retention_hours``."""

    __tablename__ = "sandbox_metrics"
    __table_args__ = (
        Index("ix_sandbox_metrics_sandbox_time", "sandbox_id", "time_ms"),
        Index("ix_sandbox_metrics_time", "time_ms"),  # the retention prune, every minute
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    sandbox_id: Mapped[str] = mapped_column(String(64))
    time_ms: Mapped[int] = mapped_column(BigInteger)
    cpu_count: Mapped[int] = mapped_column(Integer)
    cpu_used_pct: Mapped[float] = mapped_column(Float)
    mem_used: Mapped[int] = mapped_column(BigInteger)
    mem_total: Mapped[int] = mapped_column(BigInteger)
    mem_cache: Mapped[int] = mapped_column(BigInteger)
    disk_used: Mapped[int] = mapped_column(BigInteger)
    disk_total: Mapped[int] = mapped_column(BigInteger)


class SandboxLogEntry(Base):
    """One entry of a sandbox's log: a lifecycle event the gateway saw, or an event of a
    process inside (start, a line of output, end) the guest recorded. ``fields`` are strings
    (E2B's ``SandboxLogEntry.fields``); ``size`` counts the entry's bytes for the table cap;
    ``guest_seq`` is the guest's sequence number (None for the gateway's own entries), so
    collection resumes where it stopped, across gateway restarts."""

    __tablename__ = "sandbox_log_entries"
    __table_args__ = (
        Index("ix_sandbox_log_entries_sandbox_time", "sandbox_id", "time_ms"),
        Index("ix_sandbox_log_entries_time", "time_ms"),  # the retention prune, every minute
        Index("ix_sandbox_log_entries_sandbox_seq", "sandbox_id", "guest_seq"),
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    sandbox_id: Mapped[str] = mapped_column(String(64))
    time_ms: Mapped[int] = mapped_column(BigInteger)
    level: Mapped[str] = mapped_column(String(8))
    message: Mapped[str] = mapped_column(Text)
    fields: Mapped[dict[str, Any]] = mapped_column(JSON)
    size: Mapped[int] = mapped_column(Integer)
    guest_seq: Mapped[int | None] = mapped_column(BigInteger, nullable=True)


# -- chat channels (channels/) -------------------------------------------------------------


class ChannelCursor(Base):
    """How far a channel has read its source (Telegram: the last update id taken), so a
    restart neither loses nor repeats a message."""

    __tablename__ = "channel_cursors"

    channel: Mapped[str] = mapped_column(String(100), primary_key=True)
    position: Mapped[int] = mapped_column(BigInteger)
    updated_at: Mapped[datetime]


class ChannelChat(Base):
    """One chat of a channel and the agent session it continues."""

    __tablename__ = "channel_chats"

    channel: Mapped[str] = mapped_column(String(100), primary_key=True)
    chat_id: Mapped[str] = mapped_column(String(64), primary_key=True)
    agent_id: Mapped[str] = mapped_column(String(100))
    session_id: Mapped[str | None] = mapped_column(String(64))
    updated_at: Mapped[datetime]
