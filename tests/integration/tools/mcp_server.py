"""A real MCP server (official SDK) for the gateway tests: ``stdio`` or ``http PORT``."""

import os
import sys
import time

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


@server.tool()
def pid() -> int:
    """This server process's id (one long-lived session: the same on every call)."""
    return os.getpid()


@server.tool()
def slow(seconds: float) -> float:
    """Answers after ``seconds``."""
    time.sleep(seconds)
    return seconds


@server.tool()
def crash() -> int:
    """Ends the server process at once, as a crash would."""
    os._exit(1)


if __name__ == "__main__":
    if sys.argv[1:2] == ["http"]:
        server.run("streamable-http", host="127.0.0.1", port=int(sys.argv[2]))
    else:
        server.run("stdio")
