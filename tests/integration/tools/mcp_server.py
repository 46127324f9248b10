"""A real MCP server (official SDK) for the gateway tests: ``stdio`` or ``http PORT``."""

import sys

from mcp.server.mcpserver import MCPServer

server = MCPServer("sandgate-test")


@server.tool()
def add(a: int, b: int) -> int:
    """Adds two integers."""
    return a + b


@server.tool()
def shout(text: str) -> str:
    """Upper-cases a text."""
    return text.upper()


if __name__ == "__main__":
    if sys.argv[1:2] == ["http"]:
        server.run("streamable-http", host="127.0.0.1", port=int(sys.argv[2]))
    else:
        server.run("stdio")
