"""An agent's ``tools:``: the tools it may call at all, before any policy rule is read.

``agents[].tools`` lists tool-name globs; a sandbox acting as that agent gets stubs only for
matching tools, its gateway socket refuses every other tool (denied like an unknown tool,
audited with rule id ``agent-tools``), and the MCP endpoint for that agent lists and calls
only those. The policy then decides each call of a tool inside the scope, as for anyone.

SECURITY: a hard limit, independent of the policy: an ``allow`` rule that covers a tool outside
an agent's scope never lets that agent call it. Callers without an agent are not scoped (the
policy alone decides). Globs run on RE2 (``policy.patterns``), like every pattern of the
policy, and see the canonical tool name.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Protocol

from sandgate.errors import ConfigError
from sandgate.policy.patterns import Pattern, PatternError, compile_pattern

__all__ = ["AGENT_TOOLS", "AgentScope"]

#: The rule id audited when a call is outside its agent's ``tools``.
AGENT_TOOLS = "agent-tools"


class _Agent(Protocol):
    @property
    def id(self) -> str: ...

    @property
    def tools(self) -> Sequence[str]: ...


class AgentScope:
    def __init__(self, agents: Iterable[_Agent]) -> None:
        """Raises ``ConfigError`` naming the agent whose glob cannot be used."""
        self._globs: dict[str, list[Pattern]] = {}
        for agent in agents:
            if list(agent.tools) == ["*"]:
                continue
            try:
                self._globs[agent.id] = [compile_pattern("glob", g) for g in agent.tools]
            except PatternError as exc:
                raise ConfigError(f"agents: '{agent.id}': tools: {exc}") from None

    def allows(self, agent: str | None, tool: str) -> bool:
        """Whether ``agent`` may call ``tool`` at all (True for no agent, or ``tools: ["*"]``)."""
        globs = self._globs.get(agent or "")
        return globs is None or any(glob.test(tool, "the tool name") for glob in globs)
