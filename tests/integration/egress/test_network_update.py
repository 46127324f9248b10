"""``PUT /sandboxes/{id}/network`` (E2B's ``update_network``, issue 13), on every runtime: a
running sandbox's egress changes live, only within the operator's ``egress.api_allow_out``,
cuts the tunnels the new rules refuse, and is audited. Raw HTTP; the SDKs' view is
tests/compat/test_network_update.py.
"""

from __future__ import annotations

import base64
import json
from typing import Any

import httpx

from tests.fixtures.egress import EgressSandbox, Upstream, audit_records, kill, make_sandbox
from tests.fixtures.server import RunningServer

#: Holds a WebSocket-like tunnel to the fixture open in the background; the foreground part
#: returns once the tunnel is up. ``/tmp/tunnel.fifo`` gets one line when it ends: "closed"
#: (the proxy cut it) or "echo" (it still carried bytes after ``/tmp/poke`` appeared).
_HOLD = r"""
import os, socket, sys
target = sys.argv[1]
os.mkfifo("/tmp/tunnel.fifo")
read, write = os.pipe()
if os.fork():
    os.close(write)
    print(os.read(read, 100).decode())
    sys.exit(0)
os.setsid()
sock = socket.create_connection(("127.0.0.1", 3128), timeout=60)
sock.sendall(f"CONNECT {target} HTTP/1.1\r\nHost: {target}\r\n\r\n".encode())
upgrade = "Upgrade: x\r\nConnection: Upgrade\r\n"
sock.sendall(f"GET /upgrade HTTP/1.1\r\nHost: {target}\r\n{upgrade}\r\n".encode())
head = b""
while head.count(b"\r\n\r\n") < 2:
    chunk = sock.recv(1)
    if not chunk:
        break
    head += chunk
os.write(write, b"up" if b" 101 " in head else head[:200])
os.close(write)
try:
    data = sock.recv(100)
    outcome = "closed" if not data else "data"
except OSError:
    outcome = "closed"
with open("/tmp/tunnel.fifo", "w") as fifo:
    fifo.write(outcome + "\n")
"""


def _update(
    server: RunningServer, sandbox_id: str, body: dict[str, Any], key: str | None = None
) -> httpx.Response:
    return httpx.put(
        f"{server.url}/sandboxes/{sandbox_id}/network",
        json=body,
        headers={"X-API-Key": key or server.api_key},
        timeout=60,
    )


def _info(server: RunningServer, sandbox_id: str) -> dict[str, Any]:
    answer = httpx.get(
        f"{server.url}/sandboxes/{sandbox_id}", headers={"X-API-Key": server.api_key}
    )
    assert answer.status_code == 200, answer.text
    result: dict[str, Any] = answer.json()
    return result


def test_update_network_opens_and_closes_egress_live(
    egress_sandbox: EgressSandbox, upstream: Upstream
) -> None:
    server, box = egress_sandbox.server, egress_sandbox
    url = f"http://one.api.test:{upstream.port}/live"
    assert box.probe("urlopen", url)["reason"] == "host_not_allowed"

    opened = _update(server, box.id, {"allowOut": ["one.api.test"]})
    assert opened.status_code == 204, opened.text
    assert box.probe("urlopen", url) == {
        "status": 200,
        "body": "hello from fixture /live",
        "uid": 1000,
    }
    assert _info(server, box.id)["network"]["allowOut"] == ["one.api.test"]

    # Omitted fields are cleared (E2B): an empty update closes it again.
    closed = _update(server, box.id, {})
    assert closed.status_code == 204, closed.text
    assert box.probe("urlopen", url)["reason"] == "host_not_allowed"
    assert _info(server, box.id)["network"]["allowOut"] == []

    updates = [r for r in audit_records(server, box.id) if r["event"] == "egress.update"]
    assert [u["policy"]["allow_out"] for u in updates] == [["network.allowOut#0"], []]
    assert updates[0]["subject"]["team"] and updates[0]["outcome"] == "updated"


def test_update_network_stays_within_the_operator_ceiling(
    egress_sandbox: EgressSandbox, upstream: Upstream
) -> None:
    server, box = egress_sandbox.server, egress_sandbox
    assert _update(server, box.id, {"allowOut": ["one.api.test"]}).status_code == 204
    for body in (
        {"allowOut": ["one.api.test", "example.com"]},
        {"allowOut": ["*"]},
        {"allowOut": ["one.api.test:22"]},
        {"allowOut": ["10.0.0.0/8"]},
        {"allowOut": ["one.api.test"], "dnsServers": ["8.8.8.8"]},
        {"allowOut": ["one.api.test"], "egressProxy": {"address": "127.0.0.1:1080"}},
        {
            "allowOut": ["one.api.test"],
            "rules": {"one.api.test": [{"transform": {"headers": {"Host": "x"}}}]},
        },
    ):
        refused = _update(server, box.id, body)
        assert refused.status_code == 400, (body, refused.text)
    # A refused update changes nothing.
    url = f"http://one.api.test:{upstream.port}/still"
    assert box.probe("urlopen", url)["status"] == 200
    assert _info(server, box.id)["network"]["allowOut"] == ["one.api.test"]
    updates = [r for r in audit_records(server, box.id) if r["event"] == "egress.update"]
    assert len(updates) == 1


def test_update_network_cuts_tunnels_it_no_longer_allows(
    egress_server: RunningServer, upstream: Upstream
) -> None:
    box = make_sandbox(egress_server, network={"allowOut": ["one.api.test"]})
    try:
        script = base64.b64encode(_HOLD.encode()).decode()
        held = box.shell(
            f"echo {script} | base64 -d > /tmp/hold.py && "
            f"python3 /tmp/hold.py one.api.test:{upstream.port}"
        )
        assert held.stdout.strip() == "up", held.stdout + held.stderr
        assert _update(egress_server, box.id, {"denyOut": ["0.0.0.0/0"]}).status_code == 204
        ended = box.shell("timeout 20 cat /tmp/tunnel.fifo")
        assert ended.stdout.strip() == "closed", ended.stdout + ended.stderr
        cut = [
            r
            for r in audit_records(egress_server, box.id)
            if r["event"] == "egress.close" and r["reason"] == "policy_updated"
        ]
        assert [r["target"] for r in cut] == [f"one.api.test:{upstream.port}"]
    finally:
        kill(box)


def test_update_network_needs_a_running_sandbox_of_the_team(
    egress_server: RunningServer,
) -> None:
    other = json.loads(
        egress_server.cli("keys", "create", "--team", "net-other", "--name", "o", "--json").stdout
    )["key"]
    box = make_sandbox(egress_server)
    try:
        foreign = _update(egress_server, box.id, {"allowOut": ["one.api.test"]}, key=other)
        assert foreign.status_code == 404, foreign.text
        paused = httpx.post(
            f"{egress_server.url}/sandboxes/{box.id}/pause",
            headers={"X-API-Key": egress_server.api_key},
            timeout=60,
        )
        assert paused.status_code == 204, paused.text
        conflict = _update(egress_server, box.id, {"allowOut": ["one.api.test"]})
        assert conflict.status_code == 409, conflict.text
        assert "paused" in conflict.json()["message"]
    finally:
        kill(box)
    gone = _update(egress_server, box.id, {})
    assert gone.status_code == 404, gone.text
