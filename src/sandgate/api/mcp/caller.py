"""Who an MCP request acts as; kept apart from the server so that ``sandgate serve`` can check
callers without importing the MCP SDK (it is loaded on the first MCP request)."""

from __future__ import annotations

from dataclasses import dataclass

from sandgate.access import Principal
from sandgate.policy import Subject

__all__ = ["McpCaller"]


@dataclass(frozen=True)
class McpCaller:
    """Who an MCP request acts as: a principal, and the agent whose tools and policy apply."""

    principal: Principal
    agent: str | None

    @property
    def subject(self) -> Subject:
        """The policy and audit subject of the caller's gateway calls (``mcp-<key id>``)."""
        return Subject(
            sandbox_id=f"mcp-{self.principal.api_key_id}",
            team_id=self.principal.team_id,
            api_key_id=self.principal.api_key_id,
            agent=self.agent,
        )
