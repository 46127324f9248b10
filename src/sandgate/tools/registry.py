"""The tools a gateway offers, built from the ``tools:`` section.

``exec``, ``http``, ``python`` and ``builtin`` tools are built synchronously; ``mcp`` servers
get their long-lived sessions from ``load_mcp`` (async, at start-up), which waits for each to
list its tools. A server that is not up by then is logged and its tools are unknown (calls to
them are denied: fail closed) until its session comes up, when they are added; the rest of
the gateway works meanwhile. ``close`` ends the sessions.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import structlog

from sandgate.config import BuiltinTool, ExecTool, HttpTool, McpTool, PythonTool, ToolConfig
from sandgate.errors import ConfigError, ToolFailed
from sandgate.policy import ToolShape
from sandgate.secrets import SecretStore
from sandgate.tools.builtin import http_fetch, kv, workflow_run
from sandgate.tools.executors.exec import ExecExecutor
from sandgate.tools.executors.http import HttpExecutor
from sandgate.tools.executors.python import PythonExecutor, load_entry_point
from sandgate.tools.tool import Executor, RetryPolicy, Tool

if TYPE_CHECKING:  # the MCP SDK is imported only when an MCP server is configured
    import mcp_types

    from sandgate.tools.executors._mcp_session import McpSession

__all__ = ["ToolRegistry", "tool_shapes"]

log = structlog.get_logger("sandgate.tools")

#: How long start-up waits for an MCP server to come up and list its tools.
_MCP_START_S = 60.0


class ToolRegistry:
    def __init__(self, configs: Iterable[ToolConfig], home: Path) -> None:
        self._configs = list(configs)
        self._home = home
        self._tools: dict[str, Tool] = {}
        self._sessions: dict[str, McpSession] = {}
        for config in self._configs:
            if not isinstance(config, McpTool):
                self._add(_tool(config, self._executor(config), config.parameters))

    def get(self, name: str) -> Tool | None:
        return self._tools.get(name)

    def all(self) -> list[Tool]:
        return sorted(self._tools.values(), key=lambda t: t.name)

    async def load_mcp(self, secrets: SecretStore, wait_s: float = _MCP_START_S) -> None:
        """Starts a session for every configured MCP server and waits (up to ``wait_s``) for
        each to list its tools; a server not up by then is logged. Idempotent."""
        starting = []
        for config in self._configs:
            if not isinstance(config, McpTool) or config.name in self._sessions:
                continue
            from sandgate.tools.executors._mcp_session import McpSession

            try:
                env = {**config.env, **secrets.resolve(config.secrets)}
            except ToolFailed as exc:
                log.error("tools.mcp_unavailable", server=config.name, error=exc.message)
                continue
            session = McpSession(
                config,
                env,
                self._home / "tools" / "work" / f"mcp-{config.name}",
                functools.partial(self._import, config),
            )
            self._sessions[config.name] = session
            starting.append((config.name, session.start(wait_s)))
        for name, up in zip(
            [n for n, _ in starting],
            await asyncio.gather(*(s for _, s in starting)),
            strict=True,
        ):
            if not up:
                health = self._sessions[name].health
                log.error("tools.mcp_unavailable", server=name, error=health.last_error)

    async def close(self) -> None:
        """Ends every MCP session (stdio servers exit)."""
        sessions, self._sessions = self._sessions, {}
        await asyncio.gather(*(session.close() for session in sessions.values()))

    def mcp_health(self) -> dict[str, dict[str, Any]]:
        """Each MCP server's session: state (starting, up, restarting), restarts, last error."""
        return {name: s.health.as_dict() for name, s in sorted(self._sessions.items())}

    def _import(self, config: McpTool, listed: list[mcp_types.Tool]) -> None:
        session = self._sessions.get(config.name)
        if session is None:
            return
        from sandgate.tools.executors.mcp import McpExecutor, gateway_name

        added = 0
        for remote in listed:
            name = gateway_name(config.name, remote.name)
            if name in self._tools:
                continue
            schema = dict(remote.input_schema or {"type": "object", "properties": {}})
            description = remote.description or f"{remote.name} (MCP server {config.name})"
            self._add(_tool(config, McpExecutor(session, remote.name), schema, name, description))
            added += 1
        if added:
            log.info("tools.mcp_imported", server=config.name, tools=added)

    def _add(self, tool: Tool) -> None:
        if tool.name in self._tools:
            raise ConfigError(f"tools: two tools are named '{tool.name}'")
        self._tools[tool.name] = tool

    def _executor(self, config: ToolConfig) -> Executor:
        if isinstance(config, ExecTool):
            return ExecExecutor(config.command, config.env)
        if isinstance(config, HttpTool):
            return HttpExecutor(config.method, config.url, config.headers, config.body)
        if isinstance(config, PythonTool):
            return PythonExecutor(load_entry_point(config.entry))
        if isinstance(config, BuiltinTool):
            if config.name == "kv":
                return kv.KvExecutor(self._home / "tools" / "kv.db")
            if config.name == "http_fetch":
                return http_fetch.HttpFetchExecutor(config.allow_domains)
            if config.name == "workflow_run":
                return workflow_run.WorkflowRunExecutor()
            raise ConfigError(f"tools: there is no builtin tool '{config.name}' ({_BUILTINS})")
        raise ConfigError(f"tools: '{config.name}' has no executor here")


def tool_shapes(configs: Iterable[ToolConfig]) -> list[ToolShape]:
    """The declared tools as ``policy lint`` sees them, without building executors or
    starting MCP servers (an MCP server stands for every ``<name>_*`` tool)."""
    shapes = []
    for config in configs:
        if isinstance(config, McpTool):
            shapes.append(ToolShape(config.name, {}, None, prefix=True))
        else:
            parameters, action = config.parameters, config.action
            if isinstance(config, BuiltinTool):
                module = _builtin(config)
                parameters, action = module.PARAMETERS, module.ACTION
            shapes.append(ToolShape(config.name, parameters, action))
    return shapes


def _builtin(config: BuiltinTool) -> Any:
    """The module of a builtin tool (its schema, description, action and idempotence)."""
    modules = {"kv": kv, "http_fetch": http_fetch, "workflow_run": workflow_run}
    if config.name not in modules:
        raise ConfigError(f"tools: there is no builtin tool '{config.name}' ({_BUILTINS})")
    return modules[config.name]


_BUILTINS = "builtins: kv, http_fetch, workflow_run"


def _tool(
    config: ToolConfig,
    executor: Executor,
    parameters: dict[str, Any],
    name: str | None = None,
    description: str | None = None,
) -> Tool:
    action = config.action
    idempotent = config.idempotent
    if isinstance(config, BuiltinTool):
        module = _builtin(config)
        parameters = module.PARAMETERS
        description = config.description or module.DESCRIPTION
        action = module.ACTION
        idempotent = module.IDEMPOTENT
    retry = None
    if config.retry is not None:
        if not idempotent:
            raise ConfigError(
                f"tools: '{config.name}' is not idempotent (a write), so it cannot have retry"
            )
        retry = RetryPolicy(
            config.retry.attempts, config.retry.backoff_s, config.retry.max_backoff_s
        )
    return Tool(
        name=name or config.name,
        description=description if description is not None else config.description,
        parameters=parameters,
        kind=config.kind,
        executor=executor,
        action=action,
        timeout_s=config.timeout_s,
        output_limit=config.output_limit,
        risk=config.risk,
        secrets=tuple(config.secrets),
        idempotent=idempotent,
        retry=retry,
        output_mode=config.output.mode,
        output_fields=tuple(config.output.fields),
    )
