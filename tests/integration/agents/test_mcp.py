"""The MCP server driven by the official ``mcp`` client: ``sandgate mcp`` on stdio, and
``/v1/mcp`` of ``sandgate serve`` over streamable HTTP."""

from __future__ import annotations

import json
import sys
from typing import Any

import anyio
import httpx
import httpx2
import pytest
from mcp import Client
from mcp.client.stdio import StdioServerParameters
from mcp.client.streamable_http import streamable_http_client

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


_INITIALIZE = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {
        "protocolVersion": "2025-06-18",
        "capabilities": {},
        "clientInfo": {"name": "test", "version": "0"},
    },
}


def _http_client(headers: dict[str, str]) -> httpx2.AsyncClient:
    return httpx2.AsyncClient(headers=headers, timeout=httpx2.Timeout(30, read=300))


def test_mcp_over_streamable_http_exposes_sandboxes_and_allowed_tools(
    agents_env: AgentsEnv,
) -> None:
    server = agents_env.server
    url = f"{server.url}/v1/mcp?agent=data-analyst"

    async def scenario() -> None:
        # MCP hosts send a configured token as a bearer token.
        async with _http_client({"Authorization": f"Bearer {server.api_key}"}) as http:
            transport = streamable_http_client(url, http_client=http)
            async with Client(transport, read_timeout_seconds=120) as client:
                names = {t.name for t in (await client.list_tools()).tools}
                assert {"sandbox_create", "sandbox_run_code", "sandbox_kill", "kv"} <= names

                created = await client.call_tool("sandbox_create", {})
                assert not created.is_error, created.content
                sandbox_id = json.loads(created.content[0].text)["sandbox_id"]
                ran = await client.call_tool(
                    "sandbox_run_code", {"sandbox_id": sandbox_id, "code": "n = 6\nprint(n * 7)"}
                )
                assert json.loads(ran.content[0].text)["stdout"].strip() == "42"
                again = await client.call_tool(
                    "sandbox_run_code", {"sandbox_id": sandbox_id, "code": "print(n + 1)"}
                )
                assert json.loads(again.content[0].text)["stdout"].strip() == "7"
                await client.call_tool(
                    "sandbox_write_file",
                    {"sandbox_id": sandbox_id, "path": "/home/user/b.txt", "content": "over http"},
                )
                command = await client.call_tool(
                    "sandbox_run_command", {"sandbox_id": sandbox_id, "command": "cat b.txt"}
                )
                assert json.loads(command.content[0].text)["stdout"] == "over http"
                read = await client.call_tool(
                    "sandbox_read_file", {"sandbox_id": sandbox_id, "path": "/home/user/b.txt"}
                )
                assert read.content[0].text == "over http"

                allowed = await client.call_tool("kv", {"op": "list", "prefix": "user:"})
                assert not allowed.is_error, allowed.content
                assert isinstance(json.loads(allowed.content[0].text), list)
                denied = await client.call_tool("kv", {"op": "set", "key": "user:9", "value": 9})
                assert denied.is_error and "policy_denied" in denied.content[0].text

                killed = await client.call_tool("sandbox_kill", {"sandbox_id": sandbox_id})
                assert not killed.is_error
                gone = await client.call_tool(
                    "sandbox_run_command", {"sandbox_id": sandbox_id, "command": "true"}
                )
                assert gone.is_error

    anyio.run(scenario)

    # The subject is the caller's key, and its team owns the sandbox (see the API's list).
    subject = f"mcp-{server.key_id}"
    denied_rows = _audit(agents_env, "denied")
    assert any(r["sandbox"] == subject and r["action"] == "set" for r in denied_rows)
    allowed_rows = _audit(agents_env, "allowed")
    assert any(r["sandbox"] == subject and r["action"] == "list" for r in allowed_rows)


def test_mcp_over_streamable_http_takes_x_api_key(agents_env: AgentsEnv) -> None:
    async def scenario() -> set[str]:
        async with _http_client({"X-API-Key": agents_env.server.api_key}) as http:
            transport = streamable_http_client(f"{agents_env.server.url}/v1/mcp", http_client=http)
            async with Client(transport, read_timeout_seconds=60) as client:
                return {t.name for t in (await client.list_tools()).tools}

    assert "sandbox_create" in anyio.run(scenario)


@pytest.mark.parametrize(
    "headers",
    [{}, {"X-API-Key": "e2b_" + "0" * 40}, {"Authorization": "Bearer e2b_" + "0" * 40}],
    ids=["missing", "bad-x-api-key", "bad-bearer"],
)
def test_mcp_over_streamable_http_refuses_missing_or_bad_key(
    agents_env: AgentsEnv, headers: dict[str, str]
) -> None:
    response = httpx.post(
        f"{agents_env.server.url}/v1/mcp",
        json=_INITIALIZE,
        headers={**headers, "Accept": "application/json, text/event-stream"},
    )
    assert response.status_code == 401
    body = response.json()
    assert body["code"] == 401 and body["message"]


def test_mcp_over_streamable_http_session_belongs_to_the_key_that_opened_it(
    agents_env: AgentsEnv,
) -> None:
    server = agents_env.server
    accept = {"Accept": "application/json, text/event-stream"}
    opened = httpx.post(
        f"{server.url}/v1/mcp",
        json=_INITIALIZE,
        headers={**accept, "X-API-Key": server.api_key},
    )
    assert opened.status_code == 200, opened.text
    session = {"Mcp-Session-Id": opened.headers["mcp-session-id"]}
    other = server.cli("keys", "create", "--team", "mcp-other", "--name", "other", "--json")
    other_key = json.loads(other.stdout.strip().splitlines()[-1])["key"]
    ping = {"jsonrpc": "2.0", "id": 2, "method": "ping"}

    stolen = httpx.post(
        f"{server.url}/v1/mcp",
        json=ping,
        headers={**accept, **session, "X-API-Key": other_key},
    )
    assert stolen.status_code == 404
    closed = httpx.delete(
        f"{server.url}/v1/mcp", headers={**accept, **session, "X-API-Key": server.api_key}
    )
    assert closed.status_code == 200


def test_mcp_over_streamable_http_refuses_an_undeclared_agent(agents_env: AgentsEnv) -> None:
    response = httpx.post(
        f"{agents_env.server.url}/v1/mcp?agent=nobody",
        json={"jsonrpc": "2.0", "id": 1, "method": "ping"},
        headers={"X-API-Key": agents_env.server.api_key},
    )
    assert response.status_code == 404
    assert "nobody" in response.json()["message"]


def _audit(agents_env: AgentsEnv, outcome: str) -> list[dict[str, Any]]:
    out = agents_env.server.cli("audit", "query", "--outcome", outcome, "--json").stdout
    return [json.loads(line) for line in out.splitlines()]
