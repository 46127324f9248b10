"""Egress through the in-sandbox proxy, on every runtime: what is allowed works, end to end,
and every decision is in the audit log."""

from __future__ import annotations

import json
from pathlib import Path

import httpx

from sandgate.runtimes._cgroups import SandboxCgroup, detect
from tests.fixtures.egress import (
    EgressSandbox,
    Upstream,
    audit_records,
    egress_decisions,
    kill,
    make_sandbox,
)
from tests.fixtures.runtimes import RuntimeView
from tests.fixtures.server import RunningServer


def test_allowed_host_reachable_through_proxy_env(
    egress_sandbox: EgressSandbox, upstream: Upstream
) -> None:
    before = len(upstream.requests)
    answer = egress_sandbox.probe("urlopen", f"http://allowed.test:{upstream.port}/plain?q=1")
    assert answer == {"status": 200, "body": "hello from fixture /plain?q=1", "uid": 1000}
    assert upstream.requests[before:] == [
        {"path": "/plain?q=1", "host": f"allowed.test:{upstream.port}"}
    ]
    decisions = egress_decisions(egress_sandbox.server, egress_sandbox.id)
    assert [(d["outcome"], d["host"], d["address"], d["rule"]) for d in decisions] == [
        ("allowed", "allowed.test", "127.0.0.1", "allow#0")
    ]


def test_connect_tunnel_to_allowed_host_counts_bytes(
    egress_sandbox: EgressSandbox, upstream: Upstream
) -> None:
    # Plain HTTP inside a CONNECT tunnel is read like an absolute-form request: its Host
    # is checked, and the byte counts are those of the request and response bodies.
    request = (
        f"CONNECT allowed.test:{upstream.port} HTTP/1.1\r\n\r\n"
        f"POST /tunnelled HTTP/1.1\r\nHost: allowed.test:{upstream.port}\r\n"
        "Content-Length: 5\r\n\r\nhello"
    ).encode()
    answer = egress_sandbox.proxy(request)
    assert answer["status"] == 200
    assert "hello from fixture /tunnelled" in answer["body"]
    records = audit_records(egress_sandbox.server, egress_sandbox.id)
    closed = [r for r in records if r["event"] == "egress.close"]
    assert len(closed) == 1
    assert closed[0]["bytes_up"] == 5
    assert closed[0]["bytes_down"] == len("hello from fixture /tunnelled")
    (forwarded,) = [r for r in records if r["event"] == "egress.request"]
    assert (forwarded["http_method"], forwarded["path"]) == ("POST", "/tunnelled")


def test_curl_uses_the_proxy_env(egress_sandbox: EgressSandbox, upstream: Upstream) -> None:
    result = egress_sandbox.shell(f"curl -sS -m 20 http://allowed.test:{upstream.port}/curl")
    assert result.exit_code == 0, result.stderr
    assert result.stdout == "hello from fixture /curl"


def test_denied_host_is_refused_with_reason_and_audited_once(
    egress_sandbox: EgressSandbox,
) -> None:
    answer = egress_sandbox.probe("urlopen", "http://evil.test/")
    assert answer["status"] == 403
    assert answer["reason"] == "host_not_allowed"
    decisions = egress_decisions(egress_sandbox.server, egress_sandbox.id)
    assert len(decisions) == 1
    assert decisions[0]["outcome"] == "denied"
    assert decisions[0]["reason"] == "host_not_allowed"
    assert decisions[0]["host"] == "evil.test"
    assert decisions[0]["address"] is None  # refused before any lookup


def test_attach_records_the_policy(egress_sandbox: EgressSandbox) -> None:
    attach = [
        r
        for r in audit_records(egress_sandbox.server, egress_sandbox.id)
        if r["event"] == "egress.attach"
    ]
    assert len(attach) == 1
    assert attach[0]["policy"]["allow"] == ["allow#0", "allow#1", "allow#2"]


def test_api_allow_out_within_ceiling_opens_only_that_sandbox(
    egress_server: RunningServer, upstream: Upstream
) -> None:
    url = f"http://one.api.test:{upstream.port}/api"
    opened = make_sandbox(egress_server, network={"allowOut": ["one.api.test"]})
    plain = make_sandbox(egress_server)
    try:
        assert opened.probe("urlopen", url)["status"] == 200
        refused = plain.probe("urlopen", url)
        assert (refused["status"], refused["reason"]) == (403, "host_not_allowed")
    finally:
        kill(opened)
        kill(plain)


def test_api_allow_out_outside_ceiling_fails_create(
    egress_server: RunningServer, runtime: str
) -> None:
    response = httpx.post(
        f"{egress_server.url}/v2/sandboxes",
        json={"templateID": "base", "network": {"allowOut": ["example.com"]}},
        headers={"X-API-Key": egress_server.api_key},
        timeout=60,
    )
    assert response.status_code == 400
    assert "egress.api_allow_out" in response.json()["message"]
    # The hooks attach at once (the egress hook refused here, the tool gateway's attached
    # and was undone: its records name the sandbox). Nothing of the refused sandbox is left:
    # no container, state, cgroup, stage, uid slot or directory.
    lines = (egress_server.home / "audit" / "audit.jsonl").read_text().splitlines()
    records = [json.loads(line) for line in lines]
    created = {r.get("sandbox") for r in records if r.get("event") == "sandbox.created"}
    refused = {
        r["sandbox"]
        for r in records
        if r.get("event") == "sandbox.attach" and r["sandbox"] not in created
    }
    assert refused
    view = RuntimeView(runtime, egress_server)
    host = detect()
    for sandbox_id in refused:
        assert not view.exists(sandbox_id)
        assert view.uid_claims(sandbox_id) == []
        assert not (egress_server.home / "sandboxes" / sandbox_id).exists()
        assert not (Path("/run/sandgate-rt/stage") / sandbox_id).exists()
        if runtime == "bwrap":
            assert not SandboxCgroup(host, sandbox_id).exists()


def test_api_deny_out_overrides_operator_allow(
    egress_server: RunningServer, upstream: Upstream
) -> None:
    box = make_sandbox(egress_server, network={"denyOut": ["0.0.0.0/0"]})
    try:
        answer = box.probe("urlopen", f"http://allowed.test:{upstream.port}/")
        assert (answer["status"], answer["reason"]) == (403, "denied_by_request")
    finally:
        kill(box)


def test_allow_internet_access_true_opens_nothing_by_default(
    egress_server: RunningServer,
) -> None:
    box = make_sandbox(egress_server, allow_internet_access=True)
    try:
        answer = box.probe("urlopen", "http://example.com/")
        assert (answer["status"], answer["reason"]) == (403, "host_not_allowed")
    finally:
        kill(box)


def test_websocket_upgrade_over_plain_http_is_spliced_after_the_host_check(
    egress_sandbox: EgressSandbox, upstream: Upstream
) -> None:
    target = f"allowed.test:{upstream.port}"
    payload = "frame-bytes-\x00\x81"
    before = len(upstream.requests)  # the upstream is shared with the module's other tests
    for via, path in ((target, "/upgrade-tunnel"), ("-", f"http://{target}/upgrade-absolute")):
        request = (
            f"GET {path} HTTP/1.1\r\nHost: {target}\r\nUpgrade: websocket\r\n"
            "Connection: Upgrade\r\nSec-WebSocket-Version: 13\r\n\r\n"
        )
        answer = egress_sandbox.probe(
            "upgrade", via, request.encode().hex(), payload.encode("latin-1").hex()
        )
        assert answer["head"][0] == "HTTP/1.1 101 Switching Protocols", answer
        assert "Upgrade: websocket" in answer["head"], answer
        assert answer["echo"] == payload, answer
    seen = [r for r in upstream.requests[before:] if r["path"].startswith("/upgrade")]
    assert [(r["path"], r["host"]) for r in seen] == [
        ("/upgrade-tunnel", target),
        ("/upgrade-absolute", target),
    ]


def test_non_http_bytes_in_a_connect_tunnel_are_spliced_untouched(
    egress_sandbox: EgressSandbox, upstream: Upstream
) -> None:
    # Not an HTTP request line: the proxy forwards it as it is, and the fixture (an HTTP
    # server) is the one that answers, with its own error page for an HTTP/0.9-style line.
    answer = egress_sandbox.probe(
        "tunnel", f"allowed.test:{upstream.port}", b"SSH-2.0-OpenSSH_9.2\r\n".hex()
    )
    assert answer["established"] == "HTTP/1.1 200 Connection Established", answer
    text = answer["status_line"] + answer["body"]
    assert "Bad request syntax" in text, answer
    assert "sandgate" not in text.lower(), answer
