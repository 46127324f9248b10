"""The services of one home, put together in one place.

``sandgate serve`` (``api.app``) and the commands that run agents in-process (``sandgate run``,
``chat`` and ``mcp``) build the same services through :func:`build_services`: the tool gateway
and its call pipeline, its sandbox hook, agents' skills, team secrets, volumes, egress,
telemetry, the sandbox lifecycle and the agent runner. What only a server has (the HTTP app,
template builds, workflows, Prometheus, MCP over HTTP) is added by ``api.app`` around them,
so a CLI command imports none of it. The lifecycle service itself is built by
``sandboxes.wiring``, which operator commands such as ``sandgate sandbox kill`` use alone.

Nothing is started here: the server's lifespan starts the background work (the reaper, the
samplers, the runner's cancel watch); an in-process command starts only what it uses.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass

import structlog

from sandgate.agents import AgentRunner, SkillsHook, build_runner, skills_hook, with_autonomy
from sandgate.config import Config
from sandgate.egress import EgressHook
from sandgate.identity import Issuer
from sandgate.runtimes import Runtime
from sandgate.runtimes.floors import FloorReport
from sandgate.runtimes.select import select
from sandgate.sandboxes import SandboxService
from sandgate.sandboxes.hooks import LifecycleObserver
from sandgate.sandboxes.publish import staging_dir
from sandgate.sandboxes.wiring import build_sandbox_service, instance_id
from sandgate.secrets import TeamSecrets
from sandgate.store import SecretRecords, Store, VolumeRecords
from sandgate.telemetry import Telemetry
from sandgate.tools import Gateway, ToolGatewayHook, build_gateway
from sandgate.volumes import VolumeService

__all__ = ["Services", "build_services", "log_floors", "open_home", "open_services"]

log = structlog.get_logger("sandgate.wiring")


@dataclass
class Services:
    """What one process holds to run sandboxes, tools and agents for a home."""

    config: Config
    store: Store
    runtime: Runtime
    #: The tool gateway: registry, policy, approvals, secrets, audit and the call pipeline.
    gateway: Gateway
    #: Gives each sandbox its tool socket and stubs, as its agent's gateway.
    gateway_hook: ToolGatewayHook
    #: Copies each agent's skills into its sandboxes.
    skills_hook: SkillsHook
    team_secrets: TeamSecrets
    volumes: VolumeService
    #: Workload identity: the issuer of E2B's iam tokens (``<home>/identity``).
    identity: Issuer
    #: The per-sandbox egress proxy; agents as the tool gateway decides them.
    egress_hook: EgressHook
    #: Sandbox metrics and logs (a lifecycle observer; sampled once started).
    telemetry: Telemetry
    sandboxes: SandboxService
    agents: AgentRunner

    async def close(self) -> None:
        """Closes what an in-process command opened, in the server's order: the MCP tool
        servers, the approvals, the audit log (every queued record written first), the
        store. Runs no sandbox's end: the command kills what it created first."""
        await self.gateway.registry.close()
        await asyncio.to_thread(self.gateway.approvals.close)
        await asyncio.to_thread(self.gateway.audit.close)
        self.store.close()


def build_services(
    config: Config,
    store: Store,
    runtime: Runtime,
    *,
    observers: Sequence[LifecycleObserver] = (),
) -> Services:
    """Builds every service of ``config``'s home on ``store`` and ``runtime``; ``observers``
    are told of each sandbox's lifecycle besides telemetry (the server's Prometheus metrics).

    Checks the audit log's head against its anchor first: a tampered log is reported and
    refuses every append (so every tool call), as at the server's start. Raises
    ``SandgateError`` (a secrets key, a policy or a tool definition that cannot be loaded)."""
    home = config.home_dir
    gateway = build_gateway(with_autonomy(config), store)  # autonomy as policy rules
    gateway.audit.check_head()
    gateway_hook = ToolGatewayHook(gateway, store, list(config.agents), staging_dir(home, "tools"))
    skills = skills_hook(config)
    team_secrets = TeamSecrets(
        SecretRecords(store),
        home / "secrets" / "team-secrets.key",
        max_per_team=config.limits.max_secrets_per_team,
    )
    volumes = VolumeService(
        VolumeRecords(store),
        images_dir=config.volumes_dir,
        key_path=home / "volumes" / "tokens.key",
        size_mib=config.limits.volume_mib,
        max_per_team=config.limits.max_volumes_per_team,
    )
    identity = Issuer.from_config(config)
    egress = EgressHook(
        config.egress,
        gateway.audit,
        lambda row: gateway_hook.subject(row).agent,
        secrets=gateway.secrets,
        state_dir=home / "egress",
        team_secrets=team_secrets,
        identity=identity,
    )
    telemetry = Telemetry(
        config.metrics,
        config.sandbox_logs,
        store,
        runtime,
        lambda sandbox_id: sandboxes.guest_of(sandbox_id),  # built below, before any sandbox
    )

    sandboxes = build_sandbox_service(
        config,
        store,
        runtime,
        hooks=[gateway_hook, skills, egress],
        # Queued as the service calls it: a create's record is being written while the
        # observers hear of the create.
        audit=gateway.audit.queue,
        network=egress,
        volumes=volumes,
        observers=[telemetry, *observers],
    )
    return Services(
        config=config,
        store=store,
        runtime=runtime,
        gateway=gateway,
        gateway_hook=gateway_hook,
        skills_hook=skills,
        team_secrets=team_secrets,
        volumes=volumes,
        identity=identity,
        egress_hook=egress,
        telemetry=telemetry,
        sandboxes=sandboxes,
        agents=build_runner(config, store, sandboxes, gateway, gateway_hook, skills),
    )


def open_home(config: Config) -> tuple[Store, Runtime, FloorReport]:
    """Opens ``config``'s home: creates it, opens the store (migrating it) and picks the
    runtime, logging what its floors decided (accepted exceptions at every start). Raises
    ``SandgateError`` (``RuntimeUnavailable`` with the fix when no runtime is usable)."""
    home = config.home_dir
    home.mkdir(parents=True, exist_ok=True, mode=0o700)
    store = Store.open(config.store_url)
    runtime, choice = select(config, instance_id(home))
    log_floors(choice.floors, runtime.name, choice.reason)
    return store, runtime, choice.floors


def open_services(config: Config) -> Services:
    """The services of ``config``'s home for an in-process command: its home opened as the
    server opens it, nothing started. Raises ``SandgateError``."""
    store, runtime, _ = open_home(config)
    return build_services(config, store, runtime)


def log_floors(report: FloorReport, kind: str, reason: str) -> None:
    """Says at every start what the floors decided: an error when creates are refused, a
    warning per accepted exception, and warnings for exceptions that expired or match
    nothing."""
    log.info("runtime.selected", runtime=kind, reason=reason)
    refusal = report.refusal(kind)
    if refusal is not None:
        log.error("runtime.below_floor", runtime=kind, refused=refusal)
    for finding in report.accepted(kind):
        log.warning(
            "runtime.floor_exception_accepted",
            component=finding.component,
            found=finding.found,
            source=finding.fact.source,
            cves=",".join(finding.open_cves),
            required=finding.floor.required,
            reason="; ".join(e.reason for e in finding.accepted_by),
        )
    for exception in report.expired:
        log.warning(
            "runtime.floor_exception_expired",
            component=exception.component,
            cves=",".join(exception.cves),
            expired=str(exception.expires),
        )
    for exception, cve in report.unused:
        log.warning(
            "runtime.floor_exception_unused",
            component=exception.component,
            cve=cve,
            why="no component this runtime uses is below a floor for it here; remove it",
        )
