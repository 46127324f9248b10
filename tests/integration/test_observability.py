"""Prometheus ``GET /metrics`` (issue 16) against a real server, on docker and on bwrap.

A small workload (a sandbox created from a warm pool, a command, an allowed tool call, a call
waiting for approval, a refused egress request, an error answer) must move the counters and
gauges that describe it; and ``/metrics`` is served only when enabled, behind its token when
one is set.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.fixtures.server import RunningServer, ServerFactory
from tests.framework.envd import create, run
from tests.framework.sandbox_http import wait_for

AGENT = "metrics-agent"
CONFIG: dict[str, Any] = {
    "agents": [{"id": AGENT}],
    "tools": [{"name": "kv", "kind": "builtin"}],
    "policy": {
        "rules": [
            {
                "id": "ask-writes",
                "effect": "ask",
                "subject": {"agent": AGENT},
                "tool": "kv",
                "action": "set",
            },
            {"id": "reads", "effect": "allow", "subject": {"agent": AGENT}, "tool": "kv"},
        ]
    },
    "approvals": {"timeout_s": 600},
    "templates": {"warm_pool": {"base": 1}},
    "observability": {"prometheus": True},
}
TOKEN = "scrape-token-0123456789abcdef"


Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


def scrape(server: RunningServer, **headers: str) -> Samples:
    response = httpx.get(f"{server.url}/metrics", headers=headers, timeout=30)
    assert response.status_code == 200, response.text
    assert response.headers["content-type"].startswith("text/plain; version=0.0.4")
    return {
        (sample.name, frozenset(sample.labels.items())): sample.value
        for family in text_string_to_metric_families(response.text)
        for sample in family.samples
    }


def commands(samples: Samples) -> float:
    """Processes started in sandboxes (counted as their start is recorded, just after)."""
    return value(samples, "sandgate_commands_started_total")


def value(samples: Samples, name: str, **labels: str) -> float:
    return samples.get((name, frozenset(labels.items())), 0.0)


@pytest.fixture(scope="module")
def server(runtime: str, runtime_server_factory: Any) -> RunningServer:
    started: RunningServer = runtime_server_factory(config=CONFIG)
    return started


@pytest.fixture
def sandbox(server: RunningServer) -> Iterator[dict[str, Any]]:
    box = create(server.url, server.api_key, timeout=300, metadata={"sandgate.agent": AGENT})
    yield box
    httpx.delete(
        f"{server.url}/sandboxes/{box['sandboxID']}", headers={"X-API-Key": server.api_key}
    )


def test_metrics_move_with_a_workload(
    runtime: str, server: RunningServer, sandbox: dict[str, Any]
) -> None:
    sandbox_id, token = sandbox["sandboxID"], sandbox["envdAccessToken"]
    before = scrape(server)

    def sh(command: str) -> Any:
        return run(server.url, sandbox_id, token, command)

    read = sh("kv get metrics:1")
    assert read.exit_code == 0, read.stderr
    refused = sh("curl -sS -o /dev/null -w '%{http_code}' -m 20 http://refused.test/")
    assert refused.stdout == "403", refused.stderr
    waiting = sh("nohup kv set metrics:1 x >/dev/null 2>&1 &")
    assert waiting.exit_code == 0, waiting.stderr
    missing = httpx.get(
        f"{server.url}/sandboxes/nosuchsandbox", headers={"X-API-Key": server.api_key}
    )
    assert missing.status_code == 404
    code = missing.json()["error_code"]

    after = wait_for(
        lambda: (
            (s := scrape(server))
            and value(s, "sandgate_approvals_pending") == 1
            and value(s, "sandgate_warm_pool_sandboxes", template="base") == 1
            and commands(s) - commands(before) == 3
            and s
        ),
        60,
        "the pending approval, the refilled warm pool and 3 commands in /metrics",
    )
    # The create (taken from the warm pool) and its latency.
    assert value(after, "sandgate_sandbox_creates_total", template="base", outcome="ok") >= 1
    assert value(after, "sandgate_sandbox_create_seconds_count", template="base") >= 1
    assert value(after, "sandgate_sandboxes", state="running", runtime=runtime) >= 1
    # The allowed read; the write waits for approval, so it is not counted yet.
    assert (
        value(after, "sandgate_tool_calls_total", tool="kv", outcome="allowed")
        - value(before, "sandgate_tool_calls_total", tool="kv", outcome="allowed")
        == 1
    )
    assert (
        value(after, "sandgate_egress_decisions_total", kind="request", outcome="denied")
        + value(after, "sandgate_egress_decisions_total", kind="connect", outcome="denied")
        >= 1
    )
    assert value(after, "sandgate_audit_append_seconds_count") > value(
        before, "sandgate_audit_append_seconds_count"
    )
    assert value(after, "sandgate_http_errors_total", status="404", code=code) >= 1


def test_metrics_token_is_required_when_set(sandgate_server_factory: ServerFactory) -> None:
    guarded = sandgate_server_factory(
        config={"observability": {"prometheus": True, "metrics_token": TOKEN}}
    )
    for headers in (
        {},
        {"Authorization": "Bearer wrong"},
        {"Authorization": f"Basic {TOKEN}"},
        {"X-API-Key": guarded.api_key},
    ):
        refused = httpx.get(f"{guarded.url}/metrics", headers=headers)
        assert refused.status_code == 401, headers
        assert refused.json()["error_code"] == "unauthenticated"
        assert "observability.metrics_token" in refused.json()["message"]
    samples = scrape(guarded, Authorization=f"Bearer {TOKEN}")
    assert ("sandgate_approvals_pending", frozenset()) in samples
    # The refusals were counted at the edge.
    assert value(samples, "sandgate_http_errors_total", status="401", code="unauthenticated") == 4


def test_metrics_are_not_served_unless_enabled(sandgate_server: RunningServer) -> None:
    for headers in ({}, {"X-API-Key": sandgate_server.api_key}):
        answer = httpx.get(f"{sandgate_server.url}/metrics", headers=headers)
        assert answer.status_code == 404
        assert answer.json()["error_code"] == "unknown_endpoint"


def test_a_sandbox_routed_metrics_request_never_reaches_ours(
    server: RunningServer, sandbox: dict[str, Any]
) -> None:
    """``/metrics`` routed to a sandbox (envd's port) is envd's: the sandbox's own readings,
    never the server's Prometheus exposition."""
    answer = httpx.get(
        f"{server.url}/metrics",
        headers={
            "E2b-Sandbox-Id": sandbox["sandboxID"],
            "E2b-Sandbox-Port": "49983",
            "X-Access-Token": sandbox["envdAccessToken"],
        },
    )
    assert answer.status_code == 200, answer.text
    assert {"cpu_count", "mem_total", "disk_total"} <= answer.json().keys()
    assert "sandgate_" not in answer.text
