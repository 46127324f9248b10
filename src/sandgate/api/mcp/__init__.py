"""The MCP interface: sandboxes and the caller's allowed tools, for MCP hosts."""

from sandgate.api.mcp.server import build_mcp_server

__all__ = ["build_mcp_server"]
