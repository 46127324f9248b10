"""The egress side of the sandbox lifecycle (``sandboxes.SandboxHook``).

On attach: build the sandbox's policy from the config and its store row (template, agent,
``allow_internet_access``, ``network``), bind its secrets (placeholders, and for those the CA
files ``/run/sandgate/egress-ca.pem`` and ``/run/sandgate/ca-certificates.crt``: the
gateway's trusted roots plus the CA), serve its ``egress.sock``, audit the policy, and return
the variables for its processes (proxy, placeholders, CA bundle). On detach: close the socket
and every tunnel.

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
from sandgate.egress.placeholders import SandboxSecrets, bind_secrets, load_key
from sandgate.egress.resolver import Resolver
from sandgate.egress.rules import build_policy, validate_rules
from sandgate.egress.tls import CA_ENV, EgressCA, upstream_context
from sandgate.egress.tunnel import EgressSocket, Interception, TunnelLimits
from sandgate.errors import InvalidRequest
from sandgate.guest.protocol import EGRESS_PROXY_PORT
from sandgate.runtimes.base import GUEST_DIR_IN_SANDBOX
from sandgate.sandboxes.publish import publish_file
from sandgate.secrets import SecretStore
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
    ) -> None:
        """``agent_of`` names the declared agent a sandbox acts as (the tool gateway decides,
        with its team checks), or None. ``secrets`` and ``state_dir`` (where the CA and the
        placeholder key live) are needed when ``config.secrets`` binds any. Raises
        ``InvalidHost`` for a bad configured rule."""
        validate_rules(config)
        if config.secrets and (secrets is None or state_dir is None):
            raise ValueError("egress.secrets needs the secret store and a state directory")
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

    async def attach(self, sandbox: Sandbox, host_dir: Path) -> dict[str, str]:
        """Raises ``InvalidRequest`` when the create call asks for egress the operator does
        not permit (a new sandbox only; an adopted one drops such entries)."""
        agent = self._agent_of(sandbox)
        policy = build_policy(
            self._config,
            template=sandbox.alias,
            agent=agent,
            internet_access=sandbox.allow_internet_access,
            network=sandbox.network,
            strict=sandbox.state == "starting",
        )
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
            paths = {
                "bundle": f"{GUEST_DIR_IN_SANDBOX}/{_BUNDLE_FILE}",
                "ca": f"{GUEST_DIR_IN_SANDBOX}/{_CA_FILE}",
            }
            env.update({name: value.format(**paths) for name, value in CA_ENV.items()})
        return env

    def _interception(
        self, sandbox: Sandbox, agent: str | None, host_dir: Path
    ) -> Interception | None:
        if not self._config.secrets or self._secret_store is None:
            return None
        bound = bind_secrets(
            self._config.secrets,
            self._placeholder_key,
            sandbox.id,
            template=sandbox.alias,
            agent=agent,
        )
        if not bound:
            return None
        ca = self._ca
        publish_file(host_dir, _CA_FILE, ca.pem)
        publish_file(host_dir, _BUNDLE_FILE, _system_roots() + b"\n" + ca.pem)
        return Interception(SandboxSecrets(bound, self._secret_store), ca, self._upstream)

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


def _system_roots() -> bytes:
    """The gateway's own trusted roots, which sandboxes keep trusting next to the CA."""
    candidates = [ssl.get_default_verify_paths().cafile, *_SYSTEM_BUNDLES]
    for candidate in candidates:
        if candidate and os.path.isfile(candidate):
            with open(candidate, "rb") as file:
                return file.read()
    log.warning("egress.no_system_roots", tried=[c for c in candidates if c])
    return b""
