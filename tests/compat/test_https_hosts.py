"""HTTPS hosts out of the box (issue 13): ``sandgate serve --tls`` with its local CA, and the
official SDKs at the floor and ceiling pins using only what ``sandgate env`` prints, minus the
URL overrides: E2B's own host scheme (``api.<domain>``, ``49983-<id>.<domain>``,
``49999-<id>.<domain>``, ``get_host()``) over TLS, names resolved to loopback for the client
alone (``tests/fixtures/loopback_dns.py``). On both runtimes."""

from __future__ import annotations

import asyncio
import shlex
import socket
import ssl
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from websockets.asyncio.client import connect
from websockets.exceptions import InvalidStatus

from tests.fixtures.loopback_dns import LoopbackDNS
from tests.fixtures.server import SANDBOX_DOMAIN, RunningServer, exec_sandgate
from tests.framework.ws_service import library_tarball, server_source

from .clients import PreparedClient, prepare, spec_named

pytestmark = [pytest.mark.compat, pytest.mark.one_runtime_per_client]


def printed_env(server: RunningServer) -> dict[str, str]:
    """What ``sandgate env`` tells a shell to export, run as ``serve`` says to (its flags
    passed on as variables: ``--port``, ``--tls``)."""
    flags = {"SANDGATE_SERVER__PORT": str(server.port)}
    if "--tls" in server.args:
        flags["SANDGATE_SERVER__TLS__MODE"] = "local-ca"
    assert " ".join(f"{k}={v}" for k, v in flags.items()) in " ".join(server.log_text().split())
    proc = exec_sandgate(["env"], {**server.server_env, **flags})
    assert proc.returncode == 0, proc.stderr
    found: dict[str, str] = {}
    for line in proc.stdout.splitlines():
        if line.startswith("export "):
            name, _, value = line.removeprefix("export ").partition("=")
            found[name] = shlex.split(value)[0] if value else ""
    return found


@pytest.fixture(scope="session")
def tls_server(runtime_server_factory: Callable[..., RunningServer]) -> RunningServer:
    return runtime_server_factory(tls=True)


@pytest.fixture(scope="session")
def names_to_loopback() -> Iterator[LoopbackDNS]:
    dns = LoopbackDNS(SANDBOX_DOMAIN)
    yield dns
    dns.close()


def test_sandgate_env_prints_the_host_scheme_and_the_trust(tls_server: RunningServer) -> None:
    env = printed_env(tls_server)
    home = tls_server.home
    assert env["E2B_DOMAIN"] == f"{SANDBOX_DOMAIN}:{tls_server.port}"
    assert env["E2B_API_URL"] == env["E2B_SANDBOX_URL"] == f"https://127.0.0.1:{tls_server.port}"
    assert env["NODE_EXTRA_CA_CERTS"] == str(home / "tls" / "ca.pem")
    assert env["SSL_CERT_FILE"] == env["REQUESTS_CA_BUNDLE"] == str(home / "tls" / "ca-bundle.pem")
    assert (home / "tls" / "ca.pem").read_bytes() in (home / "tls" / "ca-bundle.pem").read_bytes()


def test_the_e2b_host_scheme_works_over_tls(
    client: PreparedClient, tls_server: RunningServer, names_to_loopback: LoopbackDNS
) -> None:
    _check_host_scheme(client, tls_server, names_to_loopback)


def test_the_floor_code_interpreter_reaches_jupyter_over_tls(
    tls_server: RunningServer, names_to_loopback: LoopbackDNS
) -> None:
    """``e2b-code-interpreter`` 2.8.1 (the floor pin; the OpenAI Agents SDK's lock holds it
    with ``e2b`` 2.31.0) knows no URL override for Jupyter: only ``49999-<id>.<domain>``."""
    floor = prepare(spec_named("py-openai-agents-0.24.0"))
    out = _check_host_scheme(floor, tls_server, names_to_loopback)
    assert out["versions"]["e2b-code-interpreter"] == "2.8.1"


def _check_host_scheme(
    client: PreparedClient, tls_server: RunningServer, names_to_loopback: LoopbackDNS
) -> dict[str, Any]:
    env = printed_env(tls_server)
    # Nothing but the key, the domain and the trust: every URL comes from the host scheme.
    del env["E2B_API_URL"], env["E2B_SANDBOX_URL"]
    out = client.run("https_hosts", env, wrap=names_to_loopback.wrap)
    domain = f"{SANDBOX_DOMAIN}:{tls_server.port}"
    assert out["no_urls_given"] is True
    assert out["envd_url"].startswith("https://49983-") and out["envd_url"].endswith(domain)
    assert out["command"]["stdout"] == "over-tls\n"
    assert out["file"] == "served over https"
    assert out["run_code"] == {"ok": True, "value": "42"}
    assert out["host"].startswith("8000-") and out["host"].endswith(domain)
    assert out["get_host"] == {"status": 200, "body": "served over https"}
    assert out["get_host_without_token"] == 401
    assert out["download_url"] == out["envd_url"] + "/files"
    assert out["download"] == "served over https"
    assert out["killed"]["ok"] is True
    return out


def test_websockets_reach_a_sandbox_service_over_tls(
    client: PreparedClient,
    tls_server: RunningServer,
    names_to_loopback: LoopbackDNS,
    tmp_path: Path,
) -> None:
    """The SDK starts a WebSocket service and hands out ``get_host(port)`` and the traffic
    token; a WebSocket client reaches ``wss://<host>`` with the token (and not without)."""
    env = printed_env(tls_server)
    tarball, script = tmp_path / "wslib.tgz", tmp_path / "ws_server.py"
    tarball.write_bytes(library_tarball())
    script.write_text(server_source())
    out = client.run("ws_service", env, [str(tarball), str(script)], wrap=names_to_loopback.wrap)
    trust = ssl.create_default_context(cafile=env["NODE_EXTRA_CA_CERTS"])
    try:
        assert out["unpack"]["exit_code"] == 0 and out["listening"] is True, out
        assert out["host"].endswith(f".{SANDBOX_DOMAIN}:{tls_server.port}")

        # The asyncio client, not the sync one: the sync client reads in a thread while the
        # caller writes, and Python's ssl objects are not safe for that (spurious SSL errors).
        async def exchange(headers: dict[str, str]) -> list[str | bytes]:
            sock = socket.create_connection(("127.0.0.1", tls_server.port))
            async with connect(
                f"wss://{out['host']}/echo",
                sock=sock,
                ssl=trust,
                additional_headers=headers,
                open_timeout=30,
            ) as ws:
                await ws.send("over wss")
                text = await asyncio.wait_for(ws.recv(), 30)
                await ws.send(b"\x00\x01")
                binary = await asyncio.wait_for(ws.recv(), 30)
                return [text, binary]

        assert asyncio.run(exchange({"E2B-Traffic-Access-Token": out["token"]})) == [
            "over wss",
            b"\x00\x01",
        ]
        with pytest.raises(InvalidStatus) as refused:
            asyncio.run(exchange({}))
        assert refused.value.response.status_code == 401
    finally:
        httpx.delete(
            f"{tls_server.url}/sandboxes/{out['sandbox_id']}",
            headers={"X-API-Key": tls_server.api_key},
            verify=trust,
        )
