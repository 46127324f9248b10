"""``e2b-mcp-server`` (E2B's MCP server, on E2B SDK 1.x) runs unchanged against Sandgate over
HTTPS (issue 13): the MCP client drives it over stdio, its ``run_code`` tool creates a sandbox
and runs Python in it. SDK 1.x has no URL overrides and sends no traffic token, so it needs
``serve --tls``, names under the domain that resolve here, and public ports
(``sandbox.allow_public_traffic``); without the last, the refusal says so. On both runtimes."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest

from tests.fixtures.loopback_dns import LoopbackDNS
from tests.fixtures.server import SANDBOX_DOMAIN, RunningServer

from .clients import E2B_MCP_SERVER, PreparedClient, prepare
from .test_https_hosts import printed_env

pytestmark = pytest.mark.compat


@pytest.fixture(scope="session")
def mcp_client() -> PreparedClient:
    return prepare(E2B_MCP_SERVER)


@pytest.fixture(scope="session")
def names_to_loopback() -> Iterator[LoopbackDNS]:
    dns = LoopbackDNS(SANDBOX_DOMAIN)
    yield dns
    dns.close()


def _sdk1_env(server: RunningServer) -> dict[str, str]:
    env = printed_env(server)
    del env["E2B_API_URL"], env["E2B_SANDBOX_URL"]  # SDK 1.x reads neither
    return env


def test_e2b_mcp_server_runs_code_in_a_sandgate_sandbox(
    runtime_server_factory: Callable[..., RunningServer],
    mcp_client: PreparedClient,
    names_to_loopback: LoopbackDNS,
) -> None:
    server = runtime_server_factory(tls=True, config={"sandbox": {"allow_public_traffic": True}})
    out = mcp_client.run("mcp_server", _sdk1_env(server), wrap=names_to_loopback.wrap)
    assert out["versions"]["e2b"].startswith("1.")
    assert out["tools"] == ["run_code"]
    assert out["is_error"] is False, out["texts"]
    assert out["output"] == {"stdout": ["42 True\n"], "stderr": []}
    assert out["created"] == 1
    assert all(killed["ok"] for killed in out["killed"])


def test_without_public_ports_the_refusal_says_what_to_change(
    runtime_server_factory: Callable[..., RunningServer],
    mcp_client: PreparedClient,
    names_to_loopback: LoopbackDNS,
) -> None:
    server = runtime_server_factory(tls=True)
    out = mcp_client.run("mcp_server", _sdk1_env(server), wrap=names_to_loopback.wrap)
    text = " ".join(out["texts"])
    assert out["is_error"] is True
    assert "401" in text and "sandbox.allow_public_traffic" in text
    assert all(killed["ok"] for killed in out["killed"])
