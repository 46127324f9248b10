"""e2b-mcp-server, unchanged, driven by the MCP client over stdio (issue 13): the client starts
the server as E2B documents it (a Python process with ``E2B_API_KEY`` and ``E2B_DOMAIN`` in its
environment, the CA trusted through ``SSL_CERT_FILE``), lists its tools and calls ``run_code``,
which creates a sandbox over ``https://api.<domain>`` and runs the code through
``https://49999-<id>.<domain>``. The server never kills its sandboxes; the scenario does,
with the same SDK (1.x), and reports which."""

from __future__ import annotations

import asyncio
import json
import os
import sys
from typing import Any

from _common import attempt, run
from e2b_code_interpreter import Sandbox
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client

SERVER = "from e2b_mcp_server import main; main()"


async def drive(code: str) -> dict[str, Any]:
    params = StdioServerParameters(
        command=sys.executable, args=["-c", SERVER], env=dict(os.environ)
    )
    async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
        await session.initialize()
        tools = await session.list_tools()
        result = await session.call_tool("run_code", {"code": code})
    texts = [item.text for item in result.content if getattr(item, "type", "") == "text"]
    return {
        "tools": [tool.name for tool in tools.tools],
        "is_error": bool(result.isError),
        "texts": texts,
    }


def scenario(args: list[str]) -> dict[str, Any]:
    before = {info.sandbox_id for info in Sandbox.list()}
    out = asyncio.run(drive("import platform\nprint(6 * 7, platform.node() != '')"))
    try:
        out["output"] = json.loads(out["texts"][0]) if not out["is_error"] else None
    except (IndexError, ValueError):
        out["output"] = None
    left = [info.sandbox_id for info in Sandbox.list() if info.sandbox_id not in before]
    out["created"] = len(left)
    out["killed"] = [attempt(lambda sid=sid: Sandbox.kill(sid)) for sid in left]
    return out


if __name__ == "__main__":
    run(scenario, packages=("e2b-mcp-server", "mcp"))
