"""The MCP interface: sandboxes and the caller's allowed tools, for MCP hosts."""

from sandgate.api.mcp.http import MCP_PATH, McpHttp
from sandgate.api.mcp.server import CallerOf, McpCaller, build_mcp_server

__all__ = ["MCP_PATH", "CallerOf", "McpCaller", "McpHttp", "build_mcp_server"]
