"""The egress side of the sandbox lifecycle (``sandboxes.SandboxHook``).

On attach: build the sandbox's policy from the config and its store row (template, agent,
``allow_internet_access``, ``network``), bind its secrets (placeholders from ``egress.secrets``
and the header rules of ``network.rules`` with the team's secrets and the identity tokens its
create call registered in ``iam``, minted by ``sandgate.identity``; for those the CA files
``/run/sandgate/egress-ca.pem`` and ``/run/sandgate/ca-certificates.crt``: the gateway's
trusted roots plus the CA), serve its ``egress.sock``, audit the policy, and return the
variables for its processes (proxy, placeholders, CA bundle). On ``update_network`` (E2B's
``PUT /sandboxes/{id}/network``): the same from the updated row, swapped into the live socket.
On detach: close the socket and every tunnel.

SECURITY: the proxy variables are a convenience for clients that honour them; the boundary is
that a sandbox has no network interface but loopback, so the socket is its only way out.
"""

from __future__ import annotations

import os
import ssl
from collections.abc import Callable
from functools import cached_property
from pathlib import Path
from typing import Final

import structlog

from sandgate.audit import AuditLog
from sandgate.config import EgressConfig
from sandgate.egress.placeholders import (
    BoundSecret,
    SandboxSecrets,
    SecretUnavailable,
    bind_secrets,
    load_key,
)
from sandgate.egress.resolver import Resolver
from sandgate.egress.rules import EgressPolicy, build_policy, validate_rules
from sandgate.egress.tls import CA_ENV, EgressCA, upstream_context
from sandgate.egress.transforms import HeaderTransforms, SecretResolver, secret_names
from sandgate.egress.tunnel import EgressSocket, Interception, TunnelLimits
from sandgate.errors import InvalidRequest, SandboxUnavailable
from sandgate.guest.protocol import EGRESS_PROXY_PORT
from sandgate.identity import Issuer, identity_names, registered_tokens
from sandgate.runtimes.base import GUEST_DIR_IN_SANDBOX
from sandgate.sandboxes.publish import publish_file
from sandgate.secrets import SecretStore
from sandgate.secrets.team import SecretUnreadable, TeamSecrets
from sandgate.store import Sandbox

__all__ = ["PROXY_ENV", "EgressHook"]

log = structlog.get_logger("sandgate.egress")

_PROXY: Final = f"http://127.0.0.1:{EGRESS_PROXY_PORT}"
PROXY_ENV: Final = {
    "HTTP_PROXY": _PROXY,
    "HTTPS_PROXY": _PROXY,
    "http_proxy": _PROXY,
    "https_proxy": _PROXY,
    "NO_PROXY": "localhost,127.0.0.1,::1",
    "no_proxy": "localhost,127.0.0.1,::1",
}
_CA_FILE: Final = "egress-ca.pem"
_BUNDLE_FILE: Final = "ca-certificates.crt"
_SYSTEM_BUNDLES: Final = ("/etc/ssl/certs/ca-certificates.crt", "/etc/pki/tls/certs/ca-bundle.crt")


class EgressHook:
    def __init__(
        self,
        config: EgressConfig,
        audit: AuditLog,
        agent_of: Callable[[Sandbox], str | None],
        *,
        secrets: SecretStore | None = None,
        state_dir: Path | None = None,
        team_secrets: TeamSecrets | None = None,
        identity: Issuer | None = None,
    ) -> None:
        """``agent_of`` names the declared agent a sandbox acts as (the tool gateway decides,
        with its team checks), or None. ``secrets`` and ``state_dir`` (where the CA and the
        placeholder key live) are needed when ``config.secrets`` binds any; ``team_secrets``
        (with ``state_dir``) when sandboxes may use ``network.rules``; ``identity`` when those
        may use workload identity tokens. Raises ``InvalidHost`` for a bad configured rule."""
        validate_rules(config)
        if config.secrets and (secrets is None or state_dir is None):
            raise ValueError("egress.secrets needs the secret store and a state directory")
        if team_secrets is not None and state_dir is None:
            raise ValueError("network.rules need a state directory for the CA")
        self._team_secrets = team_secrets
        self._identity = identity
        self._secret_store = secrets
        self._state_dir = state_dir
        self._config = config
        self._audit = audit
        self._agent_of = agent_of
        self._resolver = Resolver(config.resolve_overrides)
        self._limits = TunnelLimits(
            max_tunnels=config.max_tunnels_per_sandbox,
            connect_timeout_s=config.connect_timeout_s,
            idle_timeout_s=config.idle_timeout_s,
            max_tunnel_s=config.max_tunnel_s,
        )
        self._sockets: dict[str, EgressSocket] = {}

    def socket_of(self, sandbox_id: str) -> EgressSocket | None:
        return self._sockets.get(sandbox_id)

    def reaches_internet(self, sandbox: Sandbox) -> bool:
        """Whether ``sandbox``'s effective rules reach any public host (what E2B's
        ``allowInternetAccess`` reports): its attached policy, or for a sandbox without a
        socket (paused) the policy it would get now."""
        server = self._sockets.get(sandbox.id)
        if server is not None:
            return server.policy.reaches_internet
        try:
            policy = build_policy(
                self._config,
                template=sandbox.alias,
                agent=self._agent_of(sandbox),
                internet_access=sandbox.allow_internet_access,
                network=sandbox.network,
                strict=False,
            )
        except InvalidRequest:
            return False
        return policy.reaches_internet

    def check_network(self, sandbox: Sandbox) -> EgressPolicy:
        """The policy ``sandbox``'s row asks for, refused with ``InvalidRequest`` when it asks
        for egress the operator does not permit or names team secrets that do not exist or
        identity tokens its create call did not register."""
        policy = self._policy(sandbox, strict=True)
        self._check_rule_secrets(sandbox)
        self._check_rule_tokens(sandbox)
        return policy

    def _policy(self, sandbox: Sandbox, *, strict: bool) -> EgressPolicy:
        return build_policy(
            self._config,
            template=sandbox.alias,
            agent=self._agent_of(sandbox),
            internet_access=sandbox.allow_internet_access,
            network=sandbox.network,
            strict=strict,
        )

    def _check_rule_secrets(self, sandbox: Sandbox) -> None:
        rules = (sandbox.network or {}).get("rules") or {}
        if not rules:
            return
        if self._team_secrets is None:
            raise InvalidRequest("network.rules are not supported by this server")
        missing = self._team_secrets.missing(sandbox.team_id, secret_names(rules))
        if missing:
            raise InvalidRequest(
                f"network.rules refer to secret '{missing[0]}', which your team does not have; "
                "create it first (Secret.create / POST /secrets)"
            )

    def _check_rule_tokens(self, sandbox: Sandbox) -> None:
        rules = (sandbox.network or {}).get("rules") or {}
        wanted = identity_names(rules)
        if not wanted:
            return
        if self._identity is None:
            raise InvalidRequest("workload identity tokens are not supported by this server")
        registered = registered_tokens(sandbox.network)
        missing = [name for name in wanted if name not in registered]
        if missing:
            known = ", ".join(f"'{name}'" for name in registered) or "none"
            raise InvalidRequest(
                f"network.rules refer to identity token '{missing[0]}', which the sandbox's "
                f"create call did not register in iam.tokens (registered: {known})"
            )

    def boot_env(self, sandbox: Sandbox) -> dict[str, str]:
        """The proxy's variables; a sandbox whose egress is intercepted (header rules, bound
        secrets) gets its CA and secrets' variables from ``attach`` on top."""
        return dict(PROXY_ENV)

    async def attach(self, sandbox: Sandbox, host_dir: Path) -> dict[str, str]:
        """Raises ``InvalidRequest`` when the create call asks for egress the operator does
        not permit, or names missing team secrets (a new sandbox only; an adopted one drops
        such entries)."""
        agent = self._agent_of(sandbox)
        strict = sandbox.state == "starting"
        policy = self._policy(sandbox, strict=strict)
        if strict:
            self._check_rule_secrets(sandbox)
            self._check_rule_tokens(sandbox)
        interception = self._interception(sandbox, agent, host_dir)
        previous = self._sockets.pop(sandbox.id, None)
        if previous is not None:
            await previous.close()
        server = EgressSocket(
            sandbox.id,
            sandbox.team_id,
            policy,
            self._resolver,
            self._audit,
            self._limits,
            interception,
        )
        await server.start(host_dir / "egress.sock")
        self._sockets[sandbox.id] = server
        await self._audit.write(
            {
                "event": "egress.attach",
                "sandbox": sandbox.id,
                "subject": {"sandbox": sandbox.id, "team": sandbox.team_id, "agent": agent},
                "outcome": "attached",
                "policy": dict(policy.summary),
                "internet": policy.reaches_internet,
                "secrets": interception.secrets.names if interception else [],
            }
        )
        env = dict(PROXY_ENV)
        if interception is not None:
            env.update(interception.secrets.env)
            env.update(_ca_env())
        return env

    async def update_network(self, sandbox: Sandbox, host_dir: Path) -> dict[str, str]:
        """Applies ``sandbox``'s updated row (``network``, ``allow_internet_access``) to its
        live socket: new connections follow the new policy and rules at once; open tunnels
        the new ones refuse are cut (``EgressSocket.replace``). Audited. Returns the CA
        variables a sandbox with header rules or bound secrets needs (the caller gives them
        to processes started from now on), or ``{}``. Raises ``InvalidRequest`` (the update
        asks for more than the operator permits, or names missing secrets) and
        ``SandboxUnavailable`` (no socket: the sandbox is not attached here)."""
        server = self._sockets.get(sandbox.id)
        if server is None:
            raise SandboxUnavailable(
                f"sandbox {sandbox.id} has no egress socket here; it may be restarting"
            )
        policy = self.check_network(sandbox)
        agent = self._agent_of(sandbox)
        interception = self._interception(sandbox, agent, host_dir)
        # Audited before it takes effect: an update that cannot be recorded is not made.
        await self._audit.write(
            {
                "event": "egress.update",
                "sandbox": sandbox.id,
                "subject": {
                    "sandbox": sandbox.id,
                    "team": sandbox.team_id,
                    "api_key": sandbox.api_key_id,
                    "agent": agent,
                },
                "outcome": "updated",
                "policy": dict(policy.summary),
                "internet": policy.reaches_internet,
                "rules": _rule_summary(sandbox),
                "secrets": interception.secrets.names if interception else [],
            }
        )
        server.replace(policy, interception)
        return _ca_env() if interception is not None else {}

    def _interception(
        self, sandbox: Sandbox, agent: str | None, host_dir: Path
    ) -> Interception | None:
        bound: tuple[BoundSecret, ...] = ()
        if self._config.secrets and self._secret_store is not None:
            bound = bind_secrets(
                self._config.secrets,
                self._placeholder_key,
                sandbox.id,
                template=sandbox.alias,
                agent=agent,
            )
        transforms = self._transforms(sandbox)
        if not bound and transforms is None:
            return None
        ca = self._ca
        publish_file(host_dir, _CA_FILE, ca.pem)
        publish_file(host_dir, _BUNDLE_FILE, _system_roots() + b"\n" + ca.pem)
        secrets = SandboxSecrets(bound, self._secret_store, transforms)
        return Interception(secrets, ca, self._upstream)

    def _transforms(self, sandbox: Sandbox) -> HeaderTransforms | None:
        rules = (sandbox.network or {}).get("rules") or {}
        if not rules or self._team_secrets is None:
            return None
        registered = registered_tokens(sandbox.network)
        transforms = HeaderTransforms(
            rules,
            _team_resolver(self._team_secrets, sandbox.team_id),
            self._config.transform_ports,
            identity=(
                self._identity.for_sandbox(sandbox.id, sandbox.team_id, registered)
                if self._identity is not None and registered
                else None
            ),
        )
        return transforms or None

    @cached_property
    def _ca(self) -> EgressCA:
        assert self._state_dir is not None
        return EgressCA(self._state_dir)

    @cached_property
    def _placeholder_key(self) -> bytes:
        assert self._state_dir is not None
        return load_key(self._state_dir / "placeholder.key")

    @cached_property
    def _upstream(self) -> ssl.SSLContext:
        return upstream_context(self._config.upstream_ca_file)

    async def detach(self, sandbox_id: str) -> None:
        server = self._sockets.pop(sandbox_id, None)
        if server is not None:
            await server.close()
        if self._identity is not None:
            self._identity.forget(sandbox_id)


def _ca_env() -> dict[str, str]:
    """The variables that make common clients trust the CA (through the bundle)."""
    paths = {
        "bundle": f"{GUEST_DIR_IN_SANDBOX}/{_BUNDLE_FILE}",
        "ca": f"{GUEST_DIR_IN_SANDBOX}/{_CA_FILE}",
    }
    return {name: value.format(**paths) for name, value in CA_ENV.items()}


def _team_resolver(team_secrets: TeamSecrets, team_id: str) -> SecretResolver:
    """Resolves the team's secrets by name for the proxy, in the proxy's terms."""

    def resolve(name: str) -> str:
        try:
            return team_secrets.resolve(team_id, name)
        except SecretUnreadable as exc:
            raise SecretUnavailable(str(exc)) from None

    return resolve


def _rule_summary(sandbox: Sandbox) -> dict[str, list[str]]:
    """For the audit record: each rule host with the header *names* its rules set (values
    may hold literal credentials, so they are never recorded)."""
    rules = (sandbox.network or {}).get("rules") or {}
    summary: dict[str, list[str]] = {}
    for host, host_rules in rules.items():
        names: list[str] = []
        for rule in host_rules:
            for name in (rule.get("transform") or {}).get("headers") or {}:
                if name not in names:
                    names.append(name)
        summary[host] = names
    return summary


def _system_roots() -> bytes:
    """The gateway's own trusted roots, which sandboxes keep trusting next to the CA."""
    candidates = [ssl.get_default_verify_paths().cafile, *_SYSTEM_BUNDLES]
    for candidate in candidates:
        if candidate and os.path.isfile(candidate):
            with open(candidate, "rb") as file:
                return file.read()
    log.warning("egress.no_system_roots", tried=[c for c in candidates if c])
    return b""
