"""``mcp`` tools: every tool of an MCP server (stdio or streamable HTTP), via the official SDK.

``import_tools`` lists the server's tools once, at start-up; each becomes a gateway tool
``<server>_<tool>`` with the server's own input schema, so policy, validation, approvals and
audit apply to it like to any other tool. Each call opens its own client session: simple and
isolated (a crashed server fails one call), at the price of a process start per call on stdio.
Trust: the MCP server is operator-configured code; its output is treated like any tool's
(redacted, truncated) before it reaches the sandbox.
"""

from __future__ import annotations

import json
import re
from typing import Any

import mcp_types
from mcp import Client
from mcp.client.stdio import StdioServerParameters

from sandgate.config import McpTool
from sandgate.errors import ToolFailed, ToolTimeout
from sandgate.tools.tool import ToolContext

__all__ = ["McpExecutor", "import_tools"]

_UNSAFE = re.compile(r"[^a-z0-9_]+")


def _target(server: McpTool, secrets: dict[str, str]) -> StdioServerParameters | str:
    if server.transport == "http":
        return server.url
    return StdioServerParameters(
        command=server.command[0], args=server.command[1:], env={**server.env, **secrets}
    )


async def import_tools(server: McpTool, secrets: dict[str, str]) -> list[mcp_types.Tool]:
    """The server's tools; raises ``ToolFailed`` when the server cannot be reached."""
    try:
        async with Client(_target(server, secrets), read_timeout_seconds=server.timeout_s) as c:
            listed = await c.list_tools()
    except Exception as exc:  # any transport or protocol failure of the operator's server
        raise ToolFailed(f"MCP server '{server.name}' cannot be listed: {exc!r}") from exc
    return list(listed.tools)


def gateway_name(server: str, tool: str) -> str:
    return f"{server}_{_UNSAFE.sub('_', tool.lower()).strip('_')}"[:63]


class McpExecutor:
    def __init__(self, server: McpTool, remote_name: str) -> None:
        self._server = server
        self._remote_name = remote_name

    async def run(self, arguments: dict[str, Any], context: ToolContext) -> Any:
        target = _target(self._server, context.secrets)
        try:
            async with Client(target, read_timeout_seconds=context.timeout_s) as client:
                result = await client.call_tool(self._remote_name, arguments)
        except TimeoutError:
            raise ToolTimeout(f"{context.tool}: the MCP server did not answer in time") from None
        except Exception as exc:  # transport/protocol failure of the operator's server
            raise ToolFailed(f"{context.tool}: MCP call failed: {exc!r}") from exc
        texts = [c.text for c in result.content if isinstance(c, mcp_types.TextContent)]
        if result.is_error:
            raise ToolFailed(f"{context.tool} failed: {' '.join(texts) or 'error'}")
        if result.structured_content is not None:
            return result.structured_content
        if len(texts) == 1:
            try:
                return json.loads(texts[0])
            except ValueError:
                return texts[0]
        return texts
