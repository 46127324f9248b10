"""The configuration schema: one validated document, unknown keys rejected."""

from __future__ import annotations

from datetime import date
from pathlib import Path
from typing import Annotated, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    StringConstraints,
    field_validator,
    model_validator,
)

from sandgate.config._agents import (
    AgentConfig,
    ProviderConfig,
    SkillsConfig,
    check_agent_references,
)
from sandgate.config._channels import ChannelsConfig, check_channel_references
from sandgate.config._egress import EgressConfig
from sandgate.config._gateway import (
    ApprovalsConfig,
    AuditConfig,
    PolicyConfig,
    SecretSource,
    ToolConfig,
    check_gateway_references,
)
from sandgate.config._identity import IdentityConfig
from sandgate.config._telemetry import MetricsConfig, ObservabilityConfig, SandboxLogsConfig
from sandgate.config._workflows import WorkflowsConfig, check_workflow_references


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class TlsConfig(_Section):
    """HTTPS on the server's one port: the API (``api.<domain>``) and every
    ``<port>-<id>.<domain>`` host (docs/operations.md, "HTTPS")."""

    #: ``off``: plain HTTP. ``local-ca``: a CA made on first use in ``<home>/tls`` signs a
    #: certificate for ``<domain>``, ``*.<domain>``, ``localhost`` and the loopback addresses,
    #: renewed before it expires; clients trust the CA (``sandgate env`` prints how).
    #: ``files``: your own certificate chain and key (a wildcard for ``*.<domain>`` plus
    #: ``<domain>``), read again when the files change (a renewal needs no restart).
    mode: Literal["off", "local-ca", "files"] = "off"
    cert_file: Path | None = None
    key_file: Path | None = None

    @model_validator(mode="after")
    def _files_for_files_mode(self) -> TlsConfig:
        given = self.cert_file is not None, self.key_file is not None
        if self.mode == "files" and not all(given):
            raise ValueError("mode files needs cert_file and key_file (PEM)")
        if self.mode != "files" and any(given):
            raise ValueError("cert_file and key_file are read only with mode: files")
        return self

    @property
    def enabled(self) -> bool:
        return self.mode != "off"


class ServerConfig(_Section):
    host: str = "127.0.0.1"
    port: int = Field(7788, ge=0, le=65535)
    #: Base domain of ``<port>-<id>.<domain>`` hosts, returned to SDKs as ``domain``. It must
    #: never be an E2B domain, or SDKs would send tokens to E2B's cloud.
    domain: str = "sandbox.localhost"
    #: Largest JSON body the control plane accepts.
    max_json_body_bytes: int = Field(1024 * 1024, ge=1024)
    tls: TlsConfig = TlsConfig()
    #: The port clients connect to when it is not ``port`` (a port mapping in front). With TLS
    #: it is part of the ``domain`` SDKs get (``<domain>:<port>`` unless it is 443).
    public_port: int | None = Field(None, ge=1, le=65535)

    @model_validator(mode="after")
    def _not_e2b(self) -> ServerConfig:
        if self.domain.rstrip(".").endswith(("e2b.app", "e2b.dev", "e2b.pro")):
            raise ValueError("domain must not be an E2B domain: SDKs would send tokens there")
        return self

    @property
    def sandbox_domain(self) -> str:
        """The ``domain`` SDKs get: over TLS, what ``https://<port>-<id>.<it>`` must name to
        reach this server (E2B clients paste it verbatim, a ``:port`` included). Plain-HTTP
        clients reach sandboxes through ``E2B_SANDBOX_URL``; they get ``domain`` as it is."""
        port = self.public_port or self.port
        if not self.tls.enabled or port == 443:
            return self.domain
        return f"{self.domain}:{port}"


class StoreConfig(_Section):
    #: SQLAlchemy URL; empty means SQLite at ``$SANDGATE_HOME/sandgate.db``.
    url: str = ""


class DockerConfig(_Section):
    #: The OCI runtime Sandgate's shim hands containers to (a name on PATH or a path); the
    #: engine itself runs Docker sandboxes with its ``sandgate`` runtime (the shim).
    oci_runtime: str = "runc"
    #: Docker engine address; empty means the environment's default (``DOCKER_HOST`` or the
    #: local socket).
    base_url: str = ""


#: The host components runtime floors cover (``runtimes/profiles/runtime-floors.yaml``).
FloorComponent = Literal["kernel", "docker", "containerd", "runc", "bubblewrap"]
CveId = Annotated[str, StringConstraints(pattern=r"^CVE-\d{4}-\d{4,}$")]


class FloorException(_Section):
    """One accepted risk: sandboxes may start although ``component`` is below its patched
    floor for exactly these ``cves``.

    Deliberately narrow, so an operator accepts no more than they meant: each CVE is named (no
    wildcard, no "all", no per-component switch), a feature floor without a CVE cannot be
    accepted, a reason is required, and ``expires`` (optional) ends the exception on that
    day. Accepted exceptions are logged at every start and shown by ``sandgate doctor`` and
    ``GET /health``.
    """

    component: FloorComponent
    cves: list[CveId] = Field(min_length=1)
    reason: str
    expires: date | None = None

    @field_validator("reason")
    @classmethod
    def _reason_given(cls, value: str) -> str:
        if not value.strip():
            raise ValueError("say why this risk is accepted (reason must not be empty)")
        return value.strip()


class RuntimeConfig(_Section):
    kind: Literal["auto", "docker", "bwrap"] = "auto"
    #: Where template root file systems are kept (exported from Docker images, built without
    #: an engine, or placed by hand under ``by-name/``); every sandbox's root is a
    #: copy-on-write layer over one of them. Empty means ``$SANDGATE_HOME/rootfs``.
    rootfs_dir: Path | None = None
    docker: DockerConfig = DockerConfig()
    #: Accepted risks: floors sandboxes may start below (see ``FloorException``). Empty: every
    #: enforced floor is required.
    accept_below_floor: list[FloorException] = Field(default_factory=list)
    #: A YAML file of further floors, in the shipped list's format (``floors:`` only). They add
    #: to the shipped floors; nothing in it can relax them.
    extra_floors: Path | None = None
    #: Where team volumes' disk images are kept (``<id>.ext4``). Empty means
    #: ``$SANDGATE_HOME/volumes``. Back it up with the store.
    volumes_dir: Path | None = None
    #: ``serve`` keeps sandboxes' host-side runtime files (their host directories under
    #: ``$SANDGATE_HOME/sandboxes``, bubblewrap's state under ``$SANDGATE_HOME/bwrap``, the
    #: stages under ``/run/sandgate-rt``) on a tmpfs it mounts there when the directory is
    #: empty: they are rebuilt for every start and mean nothing after a reboot, and on some
    #: file systems creating and deleting them cost each create milliseconds of CPU. Off: they
    #: stay on the file system they are on.
    tmpfs: bool = True


class LimitsConfig(_Section):
    """Caps enforced at create time; requests beyond them are refused with the cap named."""

    default_timeout_s: int = Field(300, ge=1)
    max_timeout_s: int = Field(24 * 3600, ge=1)
    default_cpu_count: int = Field(1, ge=1)
    max_cpu_count: int = Field(4, ge=1)
    default_memory_mb: int = Field(512, ge=64)
    max_memory_mb: int = Field(8192, ge=64)
    #: Each sandbox's disk: its copy-on-write layer over the template (every path it writes,
    #: home and /tmp included), capped in bytes and inodes (one per 16 KiB). It is held in
    #: memory and counted in the sandbox's memory cgroup on top of its memory; filling it is
    #: ENOSPC inside the sandbox, never host disk pressure.
    disk_mib: int = Field(2048, ge=32)
    #: Largest upload through envd's ``/files`` (bytes of the files, after gzip), refused
    #: with 413 as soon as it is crossed; unset means the sandbox's disk size.
    max_upload_mib: int | None = Field(None, ge=1)
    pids_limit: int = Field(256, ge=16)
    nofile: int = Field(1024, ge=64)
    #: Pseudo-terminals per sandbox (PTY sessions, terminals opened by code inside).
    max_ptys: int = Field(64, ge=4, le=1024)
    max_sandboxes_per_team: int = Field(20, ge=0)
    max_sandboxes_total: int = Field(200, ge=0)
    #: Each team volume's capacity (E2B ``Volume``; bytes and inodes, one inode per 16 KiB):
    #: an ext4 image under ``runtime.volumes_dir``, sparse, so host disk is used as it fills.
    volume_mib: int = Field(1024, ge=16, le=16 * 1024 * 1024)
    max_volumes_per_team: int = Field(20, ge=0)
    #: Team secrets (E2B ``Secret``) per team.
    max_secrets_per_team: int = Field(100, ge=0)
    #: Host disk a team's saved sandbox disks may hold (snapshots, sandboxes paused to disk,
    #: fork captures in flight), in MiB, under ``$SANDGATE_HOME/snapshots``. A save that
    #: would cross it is refused with 429; deleting a snapshot, resuming or killing a sandbox
    #: gives the space back.
    max_snapshot_mib_per_team: int = Field(20480, ge=0)
    #: How long a paused sandbox (memory kept or paused to disk) is kept before the reaper
    #: kills it; its ``endAt`` while paused. Resuming starts a new timeout.
    paused_retention_s: int = Field(30 * 24 * 3600, ge=60)

    @property
    def max_upload_bytes(self) -> int:
        """``max_upload_mib`` in bytes; the sandbox's disk size when unset."""
        return (self.max_upload_mib or self.disk_mib) * 1024 * 1024

    @model_validator(mode="after")
    def _defaults_within_caps(self) -> LimitsConfig:
        if self.default_timeout_s > self.max_timeout_s:
            raise ValueError("default_timeout_s must not exceed max_timeout_s")
        if self.default_cpu_count > self.max_cpu_count:
            raise ValueError("default_cpu_count must not exceed max_cpu_count")
        if self.default_memory_mb > self.max_memory_mb:
            raise ValueError("default_memory_mb must not exceed max_memory_mb")
        return self


#: The shipped code interpreter's template: warm by default when it is built (a kernel's cold
#: start is the slowest create there is).
CODE_INTERPRETER_TEMPLATE = "code-interpreter-v1"


class WarmPoolSize(_Section):
    """How many started sandboxes a template's warm pool keeps: never fewer than ``min``
    while idle, up to ``max`` while creates drain it (the pool grows when a take leaves it
    empty and shrinks back toward ``min`` after ``templates.warm_pool_idle_s`` without a
    take). A bare number ``N`` means ``{min: N, max: N}``; ``0`` turns the pool off."""

    min: int = Field(0, ge=0, le=1000)
    max: int = Field(0, ge=0, le=1000)

    @model_validator(mode="before")
    @classmethod
    def _short_form(cls, value: object) -> object:
        if isinstance(value, int) and not isinstance(value, bool):
            return {"min": value, "max": value}
        return value

    @model_validator(mode="after")
    def _ordered(self) -> WarmPoolSize:
        if self.min > self.max:
            raise ValueError(f"min ({self.min}) must not exceed max ({self.max})")
        return self


def _default_warm_pool() -> dict[str, WarmPoolSize]:
    return {CODE_INTERPRETER_TEMPLATE: WarmPoolSize(min=1, max=2)}


class TemplatesConfig(_Section):
    source: Literal["auto", "registry", "debootstrap"] = "auto"
    mirror: str = "http://deb.debian.org/debian"
    #: Build missing shipped templates when ``serve`` starts.
    build_on_start: bool = True
    #: Sandboxes kept started and unclaimed per template, so create is instant: ``{name: N}``
    #: or ``{name: {min: M, max: X}}`` (``WarmPoolSize``). Setting it replaces the default,
    #: which keeps the code interpreter warm (a template that is not built is skipped).
    warm_pool: dict[str, WarmPoolSize] = Field(default_factory=_default_warm_pool)
    #: Seconds without a take after which a pool above its ``min`` gives back half its excess
    #: (and again after each further such period).
    warm_pool_idle_s: int = Field(300, ge=1, le=86400)
    #: Whether teams may build their own templates through the E2B template API (their build
    #: steps run in the builder's isolation, not behind the sandbox wall: threat-model.md).
    team_builds: bool = True
    #: Template builds running at once; more wait (status ``waiting``) in order.
    max_concurrent_builds: int = Field(2, ge=1, le=64)
    #: Largest build-context archive one ``COPY`` step may upload.
    max_context_mib: int = Field(1024, ge=1)
    #: Largest image one template's registry repository may hold (E2B's v1 builds push to
    #: ``e2b/custom-envs/<templateID>``); uploads in progress count.
    max_push_mib: int = Field(10240, ge=1)


class SandboxConfig(_Section):
    """What code inside every sandbox may do to its own machine."""

    #: ``sudo`` (passwordless, as on E2B) gives root of the sandbox's own user namespace: an
    #: unprivileged host uid that owns nothing outside the sandbox. Off: ``sudo`` refuses and
    #: only the API's ``user="root"`` runs as root.
    sudo: bool = True
    #: ``network.allowPublicTraffic`` for create requests that do not set it. Off (the
    #: default): a sandbox's ports need its traffic token. On: anyone who can reach the server
    #: and knows a sandbox id reaches its ports, the code interpreter's included; only for
    #: clients that cannot send the token (E2B SDK 1.x, e2b-mcp-server).
    allow_public_traffic: bool = False


class LoggingConfig(_Section):
    level: Literal["debug", "info", "warning", "error"] = "info"
    json_logs: bool = False


class Config(_Section):
    """The whole configuration. ``home`` is where Sandgate keeps its data."""

    home: Path = Path("~/.sandgate")
    server: ServerConfig = ServerConfig()
    store: StoreConfig = StoreConfig()
    runtime: RuntimeConfig = RuntimeConfig()
    limits: LimitsConfig = LimitsConfig()
    sandbox: SandboxConfig = SandboxConfig()
    templates: TemplatesConfig = TemplatesConfig()
    logging: LoggingConfig = LoggingConfig()
    # Tool gateway (config/_gateway.py).
    tools: list[ToolConfig] = Field(default_factory=list)
    policy: PolicyConfig = PolicyConfig()
    approvals: ApprovalsConfig = ApprovalsConfig()
    secrets: dict[str, SecretSource] = Field(default_factory=dict)
    audit: AuditConfig = AuditConfig()
    agents: list[AgentConfig] = Field(default_factory=list)
    # Agent runner (config/_agents.py).
    providers: dict[str, ProviderConfig] = Field(default_factory=dict)
    skills: SkillsConfig = SkillsConfig()
    # Sandbox egress (config/_egress.py): nothing is reachable unless listed.
    egress: EgressConfig = EgressConfig()
    # Workload identity (config/_identity.py): E2B's iam tokens.
    identity: IdentityConfig = IdentityConfig()
    # Workflows (config/_workflows.py): durable DAGs of steps.
    workflows: WorkflowsConfig = WorkflowsConfig()
    # E2B metrics and sandbox logs (config/_telemetry.py).
    metrics: MetricsConfig = MetricsConfig()
    sandbox_logs: SandboxLogsConfig = SandboxLogsConfig()
    # Prometheus /metrics and OpenTelemetry traces (config/_telemetry.py); both off.
    observability: ObservabilityConfig = ObservabilityConfig()
    # Chat channels (config/_channels.py): Telegram.
    channels: ChannelsConfig = ChannelsConfig()

    @model_validator(mode="after")
    def _gateway_references(self) -> Config:
        check_gateway_references(self.tools, self.secrets, self.audit, self.approvals)
        check_agent_references(self.agents, self.providers, set(self.secrets))
        unknown = sorted(set(self.egress.agents) - {agent.id for agent in self.agents})
        if unknown:
            raise ValueError(f"egress.agents names undeclared agents: {', '.join(unknown)}")
        for binding in self.egress.secrets:
            if binding.secret not in self.secrets:
                raise ValueError(
                    f"egress.secrets binds '{binding.secret}', which is not declared in secrets:"
                )
        check_channel_references(self.channels, {a.id for a in self.agents}, set(self.secrets))
        return self

    @model_validator(mode="after")
    def _workflow_references(self) -> Config:
        # The workflows service checks again, keeping the checked copies (each tool step
        # then knows whether its tool is idempotent); here an error stops the load.
        for workflow in self.workflows.definitions:
            check_workflow_references(workflow, *self.workflow_context)
        return self

    @property
    def workflow_context(self) -> tuple[dict[str, bool], set[str], set[str]]:
        """What ``check_workflow_references`` checks a workflow against."""
        return workflow_context(self.tools, [a.id for a in self.agents])

    @property
    def home_dir(self) -> Path:
        return self.home.expanduser()

    @property
    def rootfs_dir(self) -> Path:
        """Where template root file systems live (``runtime.rootfs_dir``)."""
        return (self.runtime.rootfs_dir or self.home / "rootfs").expanduser()

    @property
    def volumes_dir(self) -> Path:
        """Where team volumes' images live (``runtime.volumes_dir``)."""
        return (self.runtime.volumes_dir or self.home / "volumes").expanduser()

    @property
    def store_url(self) -> str:
        return self.store.url or f"sqlite:///{self.home_dir / 'sandgate.db'}"


def workflow_context(
    tools: list[ToolConfig], agents: list[str]
) -> tuple[dict[str, bool], set[str], set[str]]:
    """Tool names with their idempotence, MCP server names and agent ids."""
    from sandgate.config._gateway import BuiltinTool, McpTool

    idempotent: dict[str, bool] = {}
    for tool in tools:
        if isinstance(tool, McpTool):
            continue
        value = tool.idempotent
        if isinstance(tool, BuiltinTool):
            value = _BUILTIN_IDEMPOTENT.get(tool.name, False)
        idempotent[tool.name] = value
    servers = {t.name for t in tools if isinstance(t, McpTool)}
    return idempotent, servers, set(agents)


#: Builtin tools' own idempotence (their modules say the same; kept here so config loading
#: needs no tool module).
_BUILTIN_IDEMPOTENT = {"kv": False, "http_fetch": True, "workflow_run": False}
