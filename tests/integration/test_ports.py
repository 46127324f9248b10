"""HTTP to services inside a sandbox through the port proxy: bodies both ways, streaming,
header hygiene, and the traffic token that keeps ports private by default."""

from __future__ import annotations

import time
from typing import Any

import httpx
import pytest

from tests.fixtures.server import RunningServer
from tests.framework.envd import create, run

pytestmark = pytest.mark.docker

ECHO_SERVER = r"""
import http.server, json, socket, sys, time
class H(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    def do_POST(self):
        body = self.rfile.read(int(self.headers.get("content-length", 0)))
        seen = {k.lower(): v for k, v in self.headers.items()}
        reply = json.dumps({"len": len(body), "head": body[:5].decode(), "headers": seen}).encode()
        self.send_response(201)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(reply)))
        self.end_headers()
        self.wfile.write(reply)
    def do_GET(self):
        self.send_response(200)
        self.send_header("transfer-encoding", "chunked")
        self.end_headers()
        if self.path == "/cut":
            self.wfile.write(b"6\r\npart 1\r\n")
            self.wfile.flush()
            self.connection.shutdown(socket.SHUT_RDWR)
            self.close_connection = True
            return
        for i in range(3):
            chunk = f"tick {i}\n".encode()
            self.wfile.write(b"%x\r\n%s\r\n" % (len(chunk), chunk))
            self.wfile.flush()
            time.sleep(0.3)
        self.wfile.write(b"0\r\n\r\n")
    def log_message(self, *args):
        pass
http.server.ThreadingHTTPServer(("127.0.0.1", 9000), H).serve_forever()
"""


def _serve(server: RunningServer, sandbox: dict[str, Any]) -> dict[str, str]:
    sid, token = sandbox["sandboxID"], sandbox["envdAccessToken"]
    run(server.url, sid, token, f"cat > /home/user/echo.py <<'EOF'\n{ECHO_SERVER}\nEOF")
    run(server.url, sid, token, "nohup python3 /home/user/echo.py >/dev/null 2>&1 &")
    headers = {"E2b-Sandbox-Id": sid, "E2b-Sandbox-Port": "9000"}
    if sandbox["trafficAccessToken"] is not None:
        headers["E2B-Traffic-Access-Token"] = sandbox["trafficAccessToken"]
    deadline = time.monotonic() + 30
    while httpx.post(server.url + "/", headers=headers, content=b"x").status_code == 502:
        if time.monotonic() > deadline:
            raise AssertionError("the echo server did not start")
        time.sleep(0.1)
    return headers


def test_bodies_streams_and_header_hygiene(
    sandgate_server: RunningServer, sandbox: dict[str, Any]
) -> None:
    headers = _serve(sandgate_server, sandbox)
    payload = b"hello" + b"x" * (3 * 1024 * 1024)
    response = httpx.post(
        sandgate_server.url + "/upload?q=1",
        headers={**headers, "X-Access-Token": "secret-ish", "X-Custom": "yes"},
        content=payload,
        timeout=60,
    )
    assert response.status_code == 201
    body = response.json()
    assert (body["len"], body["head"]) == (len(payload), "hello")
    assert body["headers"]["x-custom"] == "yes"
    for stripped in (
        "x-access-token",
        "e2b-traffic-access-token",
        "e2b-sandbox-id",
        "e2b-sandbox-port",
    ):
        assert stripped not in body["headers"], f"{stripped} must not reach the sandbox"

    def chunks():  # type: ignore[no-untyped-def]
        yield b"hello"
        yield b"y" * 1000

    chunked = httpx.post(sandgate_server.url + "/", headers=headers, content=chunks())
    # The in-sandbox server reads Content-Length only, so a chunked body arrives as empty:
    # what matters is that the proxy neither hangs nor errors.
    assert chunked.status_code == 201

    arrivals = []
    with httpx.stream("GET", sandgate_server.url + "/", headers=headers) as stream:
        for line in stream.iter_lines():
            arrivals.append((time.monotonic(), line))
    assert [line for _, line in arrivals] == ["tick 0", "tick 1", "tick 2"]
    assert arrivals[-1][0] - arrivals[0][0] > 0.4, "chunks are forwarded as they come"


def test_ports_are_private_unless_the_sandbox_asks_for_public_traffic(
    sandgate_server: RunningServer, sandbox: dict[str, Any]
) -> None:
    headers = _serve(sandgate_server, sandbox)
    url = sandgate_server.url + "/"
    token = headers.pop("E2B-Traffic-Access-Token")
    for wrong in ({}, {"E2B-Traffic-Access-Token": token[:-1] + "x"}, {"X-Access-Token": token}):
        refused = httpx.post(url, headers={**headers, **wrong}, content=b"x")
        assert refused.status_code == 401, wrong
        assert "E2B-Traffic-Access-Token" in refused.json()["message"]
    owner = {**headers, "X-Access-Token": sandbox["envdAccessToken"]}
    assert httpx.post(url, headers=owner, content=b"x").status_code == 201

    public = create(
        sandgate_server.url, sandgate_server.api_key, network={"allowPublicTraffic": True}
    )
    try:
        assert public["trafficAccessToken"] is None
        open_headers = _serve(sandgate_server, public)
        assert "E2B-Traffic-Access-Token" not in open_headers
        assert httpx.post(url, headers=open_headers, content=b"x").status_code == 201
    finally:
        httpx.delete(
            f"{sandgate_server.url}/sandboxes/{public['sandboxID']}",
            headers={"X-API-Key": sandgate_server.api_key},
        )


def test_a_response_the_service_cuts_short_reaches_the_client_cut_short(
    sandgate_server: RunningServer, sandbox: dict[str, Any]
) -> None:
    """The service dies mid-body (as when the sandbox is killed): the client must see a
    broken read, which the SDKs turn into "the sandbox was killed", not a complete answer."""
    headers = _serve(sandgate_server, sandbox)
    received = []
    with (
        pytest.raises(httpx.RemoteProtocolError),
        httpx.stream("GET", sandgate_server.url + "/cut", headers=headers) as stream,
    ):
        assert stream.status_code == 200
        for chunk in stream.iter_bytes():
            received.append(chunk)
    assert b"".join(received) == b"part 1"
