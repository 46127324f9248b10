"""The tools a gateway offers, built from the ``tools:`` section.

``exec``, ``http``, ``python`` and ``builtin`` tools are built synchronously; ``mcp`` servers
are listed by ``load_mcp`` (async, at start-up). A server that cannot be listed contributes no
tools and is logged: its tools are then simply unknown, so calls to them are denied (fail
closed), and the rest of the gateway works.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any

import structlog

from sandgate.config import BuiltinTool, ExecTool, HttpTool, McpTool, PythonTool, ToolConfig
from sandgate.errors import ConfigError, ToolFailed
from sandgate.policy import ToolShape
from sandgate.secrets import SecretStore
from sandgate.tools.builtin import http_fetch, kv, workflow_run
from sandgate.tools.executors.exec import ExecExecutor
from sandgate.tools.executors.http import HttpExecutor
from sandgate.tools.executors.mcp import McpExecutor, gateway_name, import_tools
from sandgate.tools.executors.python import PythonExecutor, load_entry_point
from sandgate.tools.tool import Executor, Tool

__all__ = ["ToolRegistry", "tool_shapes"]

log = structlog.get_logger("sandgate.tools")


class ToolRegistry:
    def __init__(self, configs: Iterable[ToolConfig], home: Path) -> None:
        self._configs = list(configs)
        self._home = home
        self._tools: dict[str, Tool] = {}
        for config in self._configs:
            if not isinstance(config, McpTool):
                self._add(_tool(config, self._executor(config), config.parameters))

    def get(self, name: str) -> Tool | None:
        return self._tools.get(name)

    def all(self) -> list[Tool]:
        return sorted(self._tools.values(), key=lambda t: t.name)

    async def load_mcp(self, secrets: SecretStore) -> None:
        """Imports the tools of every configured MCP server (once; errors are logged)."""
        for config in self._configs:
            if not isinstance(config, McpTool):
                continue
            try:
                listed = await import_tools(config, secrets.resolve(config.secrets))
            except ToolFailed as exc:
                log.error("tools.mcp_unavailable", server=config.name, error=exc.message)
                continue
            for remote in listed:
                name = gateway_name(config.name, remote.name)
                schema = dict(remote.input_schema or {"type": "object", "properties": {}})
                description = remote.description or f"{remote.name} (MCP server {config.name})"
                tool = _tool(config, McpExecutor(config, remote.name), schema, name, description)
                self._add(tool)
            log.info("tools.mcp_imported", server=config.name, tools=len(listed))

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
    )
