"""The MCP interface: sandboxes and the caller's allowed tools, for MCP hosts.

``build_mcp_server`` and ``CallerOf`` need the MCP SDK and are imported on first use, so that
a server which never sees an MCP request does not pay for loading it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from sandgate.api.mcp.caller import McpCaller
from sandgate.api.mcp.http import MCP_PATH, McpHttp

if TYPE_CHECKING:
    from sandgate.api.mcp.server import CallerOf, build_mcp_server

__all__ = ["MCP_PATH", "CallerOf", "McpCaller", "McpHttp", "build_mcp_server"]


def __getattr__(name: str) -> Any:
    if name in ("CallerOf", "build_mcp_server"):
        from sandgate.api.mcp import server

        return getattr(server, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
