"""The egress side of the sandbox lifecycle (``sandboxes.SandboxHook``).

On attach: build the sandbox's policy from the config and its store row (template, agent,
``allow_internet_access``, ``network``), serve its ``egress.sock``, audit the policy, and
return the proxy variables for its processes. On detach: close the socket and every tunnel.

SECURITY: the proxy variables are a convenience for clients that honour them; the boundary is
that a sandbox has no network interface but loopback, so the socket is its only way out.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Final

import structlog

from sandgate.audit import AuditLog
from sandgate.config import EgressConfig
from sandgate.egress.resolver import Resolver
from sandgate.egress.rules import build_policy, validate_rules
from sandgate.egress.tunnel import EgressSocket, TunnelLimits
from sandgate.guest.protocol import EGRESS_PROXY_PORT
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


class EgressHook:
    def __init__(
        self,
        config: EgressConfig,
        audit: AuditLog,
        agent_of: Callable[[Sandbox], str | None],
    ) -> None:
        """``agent_of`` names the declared agent a sandbox acts as (the tool gateway decides,
        with its team checks), or None. Raises ``InvalidHost`` for a bad configured rule."""
        validate_rules(config)
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
        previous = self._sockets.pop(sandbox.id, None)
        if previous is not None:
            await previous.close()
        server = EgressSocket(
            sandbox.id, sandbox.team_id, policy, self._resolver, self._audit, self._limits
        )
        await server.start(host_dir / "egress.sock")
        self._sockets[sandbox.id] = server
        self._audit.append(
            {
                "event": "egress.attach",
                "sandbox": sandbox.id,
                "subject": {"sandbox": sandbox.id, "team": sandbox.team_id, "agent": agent},
                "outcome": "attached",
                "policy": dict(policy.summary),
            }
        )
        return dict(PROXY_ENV)

    async def detach(self, sandbox_id: str) -> None:
        server = self._sockets.pop(sandbox_id, None)
        if server is not None:
            await server.close()
