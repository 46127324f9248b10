"""The gateway's side of the sandbox lifecycle (``sandboxes.SandboxHook``).

On attach: establish the sandbox's ``Subject`` from its store row (team, API key, metadata)
and the declared agent it names in metadata ``sandgate.agent``; write the stubs of the tools
the policy could allow it; listen on its ``gateway.sock``; audit the event. On detach: stop
listening, forget its rate-limit windows and budget, audit the event.

SECURITY: an agent named in metadata is only honoured if it is declared in ``agents:`` and,
when the agent lists teams, the sandbox's team is one of them; otherwise the sandbox acts as
no agent. The metadata is chosen by whoever created the sandbox with a valid API key, never
by code inside it. The agent's configured metadata overrides the sandbox's on conflict.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import structlog

from sandgate.config import AgentConfig
from sandgate.policy import Subject
from sandgate.store import Sandbox, Store
from sandgate.tools.pipeline import Gateway
from sandgate.tools.socket import GatewaySocket
from sandgate.tools.stubs import write_stubs

__all__ = ["AGENT_METADATA_KEY", "SANDBOX_ENV", "ToolGatewayHook"]

log = structlog.get_logger("sandgate.tools")

AGENT_METADATA_KEY = "sandgate.agent"
SANDBOX_ENV = {
    "PATH": "/run/sandgate/tools/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
    "PYTHONPATH": "/run/sandgate/tools/python",
    "NODE_PATH": "/run/sandgate/tools/js",
    # `bash -l` (how E2B SDKs run commands) resets PATH in /etc/profile; bash reads BASH_ENV
    # after the profile, so this puts the tool commands back on PATH.
    "BASH_ENV": "/run/sandgate/tools/env.sh",
}


class ToolGatewayHook:
    def __init__(
        self, gateway: Gateway, store: Store, agents: list[AgentConfig], staging: Path
    ) -> None:
        self._gateway = gateway
        self._store = store
        self._agents = {agent.id: agent for agent in agents}
        self._staging = staging
        self._sockets: dict[str, GatewaySocket] = {}

    def subject(self, sandbox: Sandbox) -> Subject:
        metadata = {str(k): str(v) for k, v in (sandbox.metadata_ or {}).items()}
        agent = self._agents.get(metadata.get(AGENT_METADATA_KEY, ""))
        if agent is not None and agent.teams:
            team = self._store.team(sandbox.team_id)
            names = {sandbox.team_id, team.name if team else ""}
            if not names & set(agent.teams):
                log.warning("tools.agent_refused", sandbox=sandbox.id, agent=agent.id)
                agent = None
        if agent is not None:
            metadata.update(agent.metadata)
        return Subject(
            sandbox_id=sandbox.id,
            team_id=sandbox.team_id,
            api_key_id=sandbox.api_key_id,
            agent=agent.id if agent else None,
            metadata=metadata,
        )

    def boot_env(self, sandbox: Sandbox) -> dict[str, str]:
        return dict(SANDBOX_ENV)

    async def attach(self, sandbox: Sandbox, host_dir: Path) -> dict[str, str]:
        subject = self.subject(sandbox)
        visible = self._gateway.visible_tools(subject)
        # A few dozen small files: written off the event loop, which a burst of creates shares.
        await asyncio.to_thread(write_stubs, visible, host_dir / "tools", self._staging)
        previous = self._sockets.pop(sandbox.id, None)
        if previous is not None:
            await previous.close()
        server = GatewaySocket(self._gateway, subject)
        await server.start(host_dir / "gateway.sock")
        self._sockets[sandbox.id] = server
        await self._gateway.audit.write(
            {
                "event": "sandbox.attach",
                "sandbox": sandbox.id,
                "subject": subject.as_dict(),
                "outcome": "attached",
                "tools": [t.name for t in visible],
            }
        )
        return dict(SANDBOX_ENV)

    async def detach(self, sandbox_id: str) -> None:
        server = self._sockets.pop(sandbox_id, None)
        if server is None:
            return
        await server.close()
        self._gateway.forget_sandbox(sandbox_id)
        try:
            await self._gateway.audit.write(
                {"event": "sandbox.detach", "sandbox": sandbox_id, "outcome": "detached"}
            )
        except Exception:  # detach must not raise (SandboxHook contract); logged instead
            log.exception("tools.audit_detach_failed", sandbox=sandbox_id)
