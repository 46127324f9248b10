"""WebSockets to a service inside a sandbox through port routing (issue 13), on both runtimes:
both routing forms, text/binary/fragmented/large messages, subprotocols, ping/pong both ways,
close codes both ways, refusals passed on honestly, and the same private-by-default traffic
token rule as HTTP."""

from __future__ import annotations

import json
import socket
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from websockets.exceptions import ConnectionClosed, InvalidStatus
from websockets.sync.client import ClientConnection, connect

from sandgate.api.ws_relay import MAX_MESSAGE_BYTES
from tests.fixtures.server import SANDBOX_DOMAIN, RunningServer
from tests.framework.sandbox_http import SandboxHttp, open_sandbox, wait_for
from tests.framework.ws_service import WS_PORT, routing_headers, start_ws_service, ws_url


@pytest.fixture
def ws_sandbox(runtime_server: RunningServer) -> Iterator[tuple[SandboxHttp, dict[str, Any]]]:
    created = httpx.post(
        f"{runtime_server.url}/v2/sandboxes",
        json={"templateID": "base", "timeout": 600},
        headers={"X-API-Key": runtime_server.api_key},
        timeout=120,
    ).json()
    sandbox = SandboxHttp(
        runtime_server.url, runtime_server.api_key, created["sandboxID"], created["envdAccessToken"]
    )
    start_ws_service(sandbox)
    yield sandbox, created
    httpx.delete(
        f"{runtime_server.url}/sandboxes/{sandbox.sandbox_id}",
        headers={"X-API-Key": runtime_server.api_key},
    )


def _by_headers(
    server: RunningServer, sandbox: SandboxHttp, path: str, token: str | None, **kwargs: Any
) -> ClientConnection:
    headers = routing_headers(sandbox)
    if token is not None:
        headers["E2B-Traffic-Access-Token"] = token
    return connect(ws_url(server.url, path), additional_headers=headers, open_timeout=30, **kwargs)


def _by_host(
    server: RunningServer, sandbox: SandboxHttp, path: str, token: str | None, **kwargs: Any
) -> ClientConnection:
    """``Host: <port>-<id>.<domain>`` on a socket to the server (the name need not resolve)."""
    sock = socket.create_connection(("127.0.0.1", server.port))
    uri = f"ws://{WS_PORT}-{sandbox.sandbox_id}.{SANDBOX_DOMAIN}:{server.port}{path}"
    headers = {} if token is None else {"E2B-Traffic-Access-Token": token}
    return connect(uri, sock=sock, additional_headers=headers, open_timeout=30, **kwargs)


def test_messages_pass_both_ways_by_either_routing_form(
    runtime_server: RunningServer, ws_sandbox: tuple[SandboxHttp, dict[str, Any]]
) -> None:
    sandbox, created = ws_sandbox
    token = created["trafficAccessToken"]
    big = bytes(range(256)) * (8 * 1024 * 1024 // 256)
    for opener in (_by_headers, _by_host):
        with opener(
            runtime_server, sandbox, "/echo", token, subprotocols=["chat.v1"], max_size=None
        ) as ws:
            assert ws.subprotocol == "chat.v1", opener.__name__
            ws.send("héllo")
            assert ws.recv(timeout=30) == "héllo"
            ws.send(b"\x00\xffbinary")
            assert ws.recv(timeout=30) == b"\x00\xffbinary"
            ws.send([b"frag", b"ments"])  # one message in two fragments
            assert ws.recv(timeout=30) == b"fragments"
            ws.send(big)
            assert ws.recv(timeout=60) == big


def test_request_headers_reach_the_service_without_credentials(
    runtime_server: RunningServer, ws_sandbox: tuple[SandboxHttp, dict[str, Any]]
) -> None:
    sandbox, created = ws_sandbox
    with _by_headers(
        runtime_server,
        sandbox,
        "/headers?x=1",
        created["trafficAccessToken"],
        origin="https://app.example",  # type: ignore[arg-type]
    ) as ws:
        seen = json.loads(ws.recv(timeout=30))
    assert seen["origin"] == "https://app.example"
    for credential in (
        "e2b-traffic-access-token",
        "x-access-token",
        "e2b-sandbox-id",
        "e2b-sandbox-port",
    ):
        assert credential not in seen, f"{credential} must not reach the sandbox"


def test_pings_are_answered_both_ways(
    runtime_server: RunningServer, ws_sandbox: tuple[SandboxHttp, dict[str, Any]]
) -> None:
    sandbox, created = ws_sandbox
    with _by_headers(runtime_server, sandbox, "/ping", created["trafficAccessToken"]) as ws:
        # The service pinged first and only speaks once the pong came back.
        assert ws.recv(timeout=30) == "pong received"
        assert ws.ping(b"client").wait(timeout=30)


def test_close_codes_and_reasons_pass_both_ways(
    runtime_server: RunningServer, ws_sandbox: tuple[SandboxHttp, dict[str, Any]]
) -> None:
    sandbox, created = ws_sandbox
    token = created["trafficAccessToken"]
    with (
        _by_headers(runtime_server, sandbox, "/close/4001/bye.now", token) as ws,
        pytest.raises(ConnectionClosed) as closed,
    ):
        ws.recv(timeout=30)
    assert closed.value.rcvd is not None
    assert (closed.value.rcvd.code, closed.value.rcvd.reason) == (4001, "bye.now")

    with _by_headers(runtime_server, sandbox, "/echo", token) as ws:
        ws.send("x")
        assert ws.recv(timeout=30) == "x"
        ws.close(4002, "client done")

    def last_close() -> str | None:
        # The client's close handshake ends at the gateway; the service gets it just after.
        with _by_headers(runtime_server, sandbox, "/last-close", token) as ws:
            seen = ws.recv(timeout=30)
        return None if seen == "none" else str(seen)

    assert wait_for(last_close, 30, "the service to see the close") == "4002 client done"


def test_a_message_over_the_cap_closes_with_1009(
    runtime_server: RunningServer, ws_sandbox: tuple[SandboxHttp, dict[str, Any]]
) -> None:
    sandbox, created = ws_sandbox
    with _by_headers(
        runtime_server, sandbox, "/echo", created["trafficAccessToken"], max_size=None
    ) as ws:
        ws.send(b"x" * (MAX_MESSAGE_BYTES + 1))
        with pytest.raises(ConnectionClosed) as closed:
            ws.recv(timeout=60)
    assert closed.value.rcvd is not None
    assert closed.value.rcvd.code == 1009


def test_ports_stay_private_for_websockets_and_refusals_are_honest(
    runtime_server: RunningServer, ws_sandbox: tuple[SandboxHttp, dict[str, Any]]
) -> None:
    sandbox, created = ws_sandbox
    token = created["trafficAccessToken"]
    assert token
    for opener in (_by_headers, _by_host):
        for wrong in (None, token[:-1] + ("x" if token[-1] != "x" else "y")):
            with pytest.raises(InvalidStatus) as refused:
                opener(runtime_server, sandbox, "/echo", wrong)
            response = refused.value.response
            assert response.status_code == 401, opener.__name__
            assert "E2B-Traffic-Access-Token" in json.loads(response.body)["message"]
    # The sandbox's own access token also opens its ports (as for HTTP).
    with connect(
        ws_url(runtime_server.url, "/echo"),
        additional_headers={**routing_headers(sandbox), "X-Access-Token": sandbox.token},
    ) as ws:
        ws.send("owner")
        assert ws.recv(timeout=30) == "owner"

    with pytest.raises(InvalidStatus) as closed_port:
        connect(
            ws_url(runtime_server.url, "/"),
            additional_headers={
                **routing_headers(sandbox, WS_PORT + 1),
                "X-Access-Token": sandbox.token,
            },
        )
    assert closed_port.value.response.status_code == 502
    assert json.loads(closed_port.value.response.body)["port"] == WS_PORT + 1

    with pytest.raises(InvalidStatus) as said_no:
        _by_headers(runtime_server, sandbox, "/refuse", token)
    assert said_no.value.response.status_code == 403
    assert said_no.value.response.body == b"no entry"


def test_public_sandboxes_take_websockets_without_a_token(
    runtime_server: RunningServer,
) -> None:
    sandbox = open_sandbox(
        runtime_server.url, runtime_server.api_key, network={"allowPublicTraffic": True}
    )
    try:
        start_ws_service(sandbox)
        with _by_host(runtime_server, sandbox, "/echo", None) as ws:
            ws.send("open")
            assert ws.recv(timeout=30) == "open"
    finally:
        httpx.delete(
            f"{runtime_server.url}/sandboxes/{sandbox.sandbox_id}",
            headers={"X-API-Key": runtime_server.api_key},
        )
