"""``mcp`` tools: every tool of an MCP server (stdio or streamable HTTP), via the official SDK.

Each configured server gets one long-lived, health-checked session (``_mcp_session``),
started with the gateway; each of its tools becomes a gateway tool ``<server>_<tool>`` with
the server's own input schema, so scope, policy, validation, approvals and audit apply to it
like to any other tool. A call is one request on that session, bounded as a whole by the
tool's ``timeout_s``. Trust: the MCP server is operator-configured code; its output is treated
like any tool's (redacted, truncated) before it reaches the sandbox.
"""

from __future__ import annotations

import json
import re
from typing import Any

import mcp_types

from sandgate.errors import ToolFailed
from sandgate.tools.executors._mcp_session import McpSession
from sandgate.tools.tool import ToolContext

__all__ = ["McpExecutor", "gateway_name"]

_UNSAFE = re.compile(r"[^a-z0-9_]+")


def gateway_name(server: str, tool: str) -> str:
    return f"{server}_{_UNSAFE.sub('_', tool.lower()).strip('_')}"[:63]


class McpExecutor:
    def __init__(self, session: McpSession, remote_name: str) -> None:
        self._session = session
        self._remote_name = remote_name

    async def run(self, arguments: dict[str, Any], context: ToolContext) -> Any:
        result = await self._session.call(
            context.tool, self._remote_name, arguments, context.timeout_s
        )
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
