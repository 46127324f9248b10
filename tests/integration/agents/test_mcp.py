"""``sandgate mcp`` (stdio) driven by the official ``mcp`` client."""

from __future__ import annotations

import json
import sys

import anyio
import pytest
from mcp import Client
from mcp.client.stdio import StdioServerParameters

from tests.integration.agents.conftest import AgentsEnv

pytestmark = pytest.mark.docker


def test_mcp_server_exposes_sandboxes_and_allowed_tools(agents_env: AgentsEnv) -> None:
    env = {
        k: v
        for k, v in agents_env.server.server_env.items()
        if k.startswith(("SANDGATE_", "PATH", "HOME", "DOCKER"))
    }
    params = StdioServerParameters(
        command=sys.executable, args=["-m", "sandgate", "mcp", "--agent", "data-analyst"], env=env
    )

    async def scenario() -> None:
        async with Client(params, read_timeout_seconds=120) as client:
            names = {t.name for t in (await client.list_tools()).tools}
            assert {"sandbox_create", "sandbox_run_code", "sandbox_kill", "kv"} <= names

            created = await client.call_tool("sandbox_create", {})
            sandbox_id = json.loads(created.content[0].text)["sandbox_id"]
            ran = await client.call_tool(
                "sandbox_run_code", {"sandbox_id": sandbox_id, "code": "n = 20\nprint(n + 1)"}
            )
            assert json.loads(ran.content[0].text)["stdout"].strip() == "21"
            again = await client.call_tool(
                "sandbox_run_code", {"sandbox_id": sandbox_id, "code": "print(n * 2)"}
            )
            assert json.loads(again.content[0].text)["stdout"].strip() == "40"
            await client.call_tool(
                "sandbox_write_file",
                {"sandbox_id": sandbox_id, "path": "/home/user/a.txt", "content": "hello"},
            )
            command = await client.call_tool(
                "sandbox_run_command", {"sandbox_id": sandbox_id, "command": "cat a.txt"}
            )
            assert json.loads(command.content[0].text)["stdout"] == "hello"
            read = await client.call_tool(
                "sandbox_read_file", {"sandbox_id": sandbox_id, "path": "/home/user/a.txt"}
            )
            assert read.content[0].text == "hello"

            # Gateway tools keep their policy: the analyst may not write.
            denied = await client.call_tool("kv", {"op": "set", "key": "user:1", "value": 1})
            assert denied.is_error and "policy_denied" in denied.content[0].text
            killed = await client.call_tool("sandbox_kill", {"sandbox_id": sandbox_id})
            assert not killed.is_error

    anyio.run(scenario)

    audit = agents_env.server.cli("audit", "query", "--outcome", "denied", "--json").stdout
    rows = [json.loads(line) for line in audit.splitlines()]
    assert any(r["sandbox"] == "mcp-mcp" and r["action"] == "set" for r in rows)
