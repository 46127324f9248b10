"""Sandbox metrics and logs (issue 13) against real sandboxes, on docker and on bwrap.

Metrics come from the sandbox's cgroup and its disk: the tests make the sandbox use CPU,
memory and disk and wait for a sample that shows it (the sampler runs every 0.5 s here).
Logs hold the lifecycle and every process's start, output and end, also for output nobody
streamed, and stay readable after the sandbox is gone.
"""

from __future__ import annotations

import json
import struct
import time
from collections.abc import Iterator
from datetime import datetime
from typing import Any

import httpx
import pytest

from tests.fixtures.server import RunningServer
from tests.framework.envd import create, run
from tests.framework.sandbox_http import wait_for

MIB = 1024 * 1024
DISK_MIB = 256
RING = 300


@pytest.fixture(scope="module")
def server(runtime: str, runtime_server_factory: Any) -> RunningServer:
    started: RunningServer = runtime_server_factory(
        extra_env={
            "SANDGATE_METRICS__INTERVAL_S": "0.5",
            "SANDGATE_LIMITS__DISK_MIB": str(DISK_MIB),
            "SANDGATE_SANDBOX_LOGS__MAX_ENTRIES_PER_SANDBOX": str(RING),
        }
    )
    return started


@pytest.fixture
def sandbox(server: RunningServer) -> Iterator[dict[str, Any]]:
    created = create(server.url, server.api_key, timeout=300)
    yield created
    httpx.delete(f"{server.url}/sandboxes/{created['sandboxID']}", headers=_key(server))


def _key(server: RunningServer, key: str | None = None) -> dict[str, str]:
    return {"X-API-Key": key or server.api_key}


def _metrics(server: RunningServer, sandbox_id: str, **params: Any) -> list[dict[str, Any]]:
    response = httpx.get(
        f"{server.url}/sandboxes/{sandbox_id}/metrics", params=params, headers=_key(server)
    )
    assert response.status_code == 200, response.text
    body: list[dict[str, Any]] = response.json()
    return body


def _logs(server: RunningServer, sandbox_id: str, **params: Any) -> dict[str, Any]:
    response = httpx.get(
        f"{server.url}/sandboxes/{sandbox_id}/logs", params=params, headers=_key(server)
    )
    assert response.status_code == 200, response.text
    body: dict[str, Any] = response.json()
    return body


def _logs_v2(server: RunningServer, sandbox_id: str, **params: Any) -> list[dict[str, Any]]:
    response = httpx.get(
        f"{server.url}/v2/sandboxes/{sandbox_id}/logs", params=params, headers=_key(server)
    )
    assert response.status_code == 200, response.text
    logs: list[dict[str, Any]] = response.json()["logs"]
    return logs


def _sh(server: RunningServer, sandbox: dict[str, Any], command: str) -> str:
    result = run(server.url, sandbox["sandboxID"], sandbox["envdAccessToken"], command)
    assert result.exit_code == 0, result
    return result.stdout


def _newest(server: RunningServer, sandbox_id: str) -> dict[str, Any]:
    return _metrics(server, sandbox_id)[-1]


def test_metrics_are_there_at_once_with_every_field(
    server: RunningServer, sandbox: dict[str, Any]
) -> None:
    sandbox_id = sandbox["sandboxID"]
    samples = _metrics(server, sandbox_id)
    assert samples, "a running sandbox's metrics are never empty"
    sample = samples[-1]
    assert set(sample) == {
        "timestamp",
        "timestampUnix",
        "cpuCount",
        "cpuUsedPct",
        "memUsed",
        "memTotal",
        "memCache",
        "diskUsed",
        "diskTotal",
    }
    assert sample["cpuCount"] == 1
    assert sample["memTotal"] == 512 * MIB
    assert sample["diskTotal"] == DISK_MIB * MIB
    assert 0 <= sample["diskUsed"] < sample["diskTotal"]
    assert 0 < sample["memUsed"] < sample["memTotal"], "the guest itself uses some memory"
    assert 0.0 <= sample["cpuUsedPct"] <= 100.0
    stamp = datetime.fromisoformat(sample["timestamp"].replace("Z", "+00:00"))
    assert int(stamp.timestamp()) == sample["timestampUnix"]
    assert abs(sample["timestampUnix"] - time.time()) < 60
    times = [s["timestampUnix"] for s in samples]
    assert times == sorted(times)


def test_metrics_follow_cpu_memory_and_disk_use(
    server: RunningServer, sandbox: dict[str, Any]
) -> None:
    sandbox_id = sandbox["sandboxID"]
    _sh(server, sandbox, "head -c $((64 * 1024 * 1024)) /dev/zero > /tmp/blob && sync")
    disk = wait_for(
        lambda: (s := _newest(server, sandbox_id))["diskUsed"] >= 64 * MIB and s,
        30,
        "a sample showing the 64 MiB file on the sandbox's disk",
    )
    assert disk["memCache"] < 64 * MIB, "the disk is reported as disk, not as cache"
    _sh(
        server,
        sandbox,
        "nohup python3 -c \"import time; b = b'x' * (96 << 20); time.sleep(30)\" >/dev/null 2>&1 &",
    )
    wait_for(
        lambda: _newest(server, sandbox_id)["memUsed"] >= 96 * MIB,
        30,
        "a sample showing 96 MiB held by a process",
    )
    _sh(server, sandbox, "nohup timeout 20 sh -c 'while :; do :; done' >/dev/null 2>&1 &")
    wait_for(
        lambda: _newest(server, sandbox_id)["cpuUsedPct"] >= 20.0,
        30,
        "a sample showing one CPU busy",
    )


def test_metrics_range_and_bad_parameters(server: RunningServer, sandbox: dict[str, Any]) -> None:
    sandbox_id = sandbox["sandboxID"]
    now = int(time.time())
    assert _metrics(server, sandbox_id, start=now - 3600, end=now - 3000) == []
    inside = _metrics(server, sandbox_id, start=now - 60, end=now + 60)
    assert inside and all(now - 60 <= s["timestampUnix"] <= now + 60 for s in inside)
    url = f"{server.url}/sandboxes/{sandbox_id}/metrics"
    for params in ({"start": "soon"}, {"start": "1.5"}, {"start": now, "end": now - 10}):
        response = httpx.get(url, params=params, headers=_key(server))
        assert response.status_code == 400, (params, response.text)
        assert response.json()["code"] == 400
    missing = httpx.get(f"{server.url}/sandboxes/nosuchsandbox/metrics", headers=_key(server))
    assert missing.status_code == 404


def test_metrics_of_many_sandboxes(server: RunningServer, sandbox: dict[str, Any]) -> None:
    second = create(server.url, server.api_key, timeout=300)
    ids = [sandbox["sandboxID"], second["sandboxID"]]
    try:
        url = f"{server.url}/sandboxes/metrics"
        joined = httpx.get(
            url, params={"sandbox_ids": ",".join([*ids, "unknownid"])}, headers=_key(server)
        )
        assert joined.status_code == 200, joined.text
        assert sorted(joined.json()["sandboxes"]) == sorted(ids)
        repeated = httpx.get(url, params=[("sandbox_ids", i) for i in ids], headers=_key(server))
        assert sorted(repeated.json()["sandboxes"]) == sorted(ids)
        for sample in repeated.json()["sandboxes"].values():
            assert sample["memTotal"] == 512 * MIB
        too_many = ",".join(f"id{i}" for i in range(101))
        refused = httpx.get(url, params={"sandbox_ids": too_many}, headers=_key(server))
        assert refused.status_code == 400 and "100" in refused.json()["message"]
        assert httpx.get(url, headers=_key(server)).status_code == 400
    finally:
        httpx.delete(f"{server.url}/sandboxes/{second['sandboxID']}", headers=_key(server))
    after = httpx.get(url, params={"sandbox_ids": ",".join(ids)}, headers=_key(server))
    assert list(after.json()["sandboxes"]) == [sandbox["sandboxID"]], "only running ones"


def test_logs_hold_lifecycle_and_process_output(
    server: RunningServer, sandbox: dict[str, Any]
) -> None:
    sandbox_id = sandbox["sandboxID"]
    marker = f"mark{time.time_ns()}"
    result = run(
        server.url,
        sandbox_id,
        sandbox["envdAccessToken"],
        f"echo {marker}-out; echo {marker}-err >&2; printf 'no newline {marker}'; exit 3",
    )
    assert result.exit_code == 3
    body = _logs(server, sandbox_id)
    assert set(body) == {"logs", "logEntries"}
    assert len(body["logs"]) == len(body["logEntries"])
    entries = body["logEntries"]
    created = [e for e in entries if e["fields"].get("event_type") == "sandbox_created"]
    assert len(created) == 1 and created[0]["level"] == "info"
    assert created[0]["fields"]["logger"] == "sandboxSvc"
    starts = [e for e in entries if marker in e["fields"].get("command", "")]
    assert len(starts) == 1
    pid = starts[0]["fields"]["pid"]
    mine = [e for e in entries if e["fields"].get("pid") == pid]
    lines = [(e["fields"].get("stream"), e["message"]) for e in mine]
    assert ("stdout", f"{marker}-out") in lines
    assert ("stderr", f"{marker}-err") in lines
    assert ("stdout", f"no newline {marker}") in lines
    end = [e for e in mine if e["fields"]["event_type"] == "process_end"]
    assert len(end) == 1 and end[0]["fields"]["exit_code"] == "3"
    assert all(e["fields"]["logger"] == "processSvc" for e in mine)
    # v1's raw lines are the same entries as JSON objects (what the CLI parses).
    parsed = [json.loads(item["line"]) for item in body["logs"]]
    assert all(p["sandboxID"] == sandbox_id and "level" in p for p in parsed)
    assert any(p.get("message") == f"{marker}-out" for p in parsed)
    stamps = [e["timestamp"] for e in entries]
    assert stamps == sorted(stamps)


def test_logs_keep_output_nobody_streamed_and_survive_the_kill(
    server: RunningServer,
) -> None:
    created = create(server.url, server.api_key, timeout=300)
    sandbox_id = created["sandboxID"]
    marker = f"bg{time.time_ns()}"
    # The client reads the start event and goes away; the output comes later, unwatched.
    with (
        httpx.Client(timeout=10) as http,
        http.stream(
            "POST",
            f"{server.url}/process.Process/Start",
            content=_start_envelope(f"sleep 1; echo {marker}-unwatched"),
            headers={
                "E2b-Sandbox-Id": sandbox_id,
                "E2b-Sandbox-Port": "49983",
                "X-Access-Token": created["envdAccessToken"],
                "content-type": "application/connect+json",
                "connect-protocol-version": "1",
            },
        ) as response,
    ):
        assert response.status_code == 200
        next(response.iter_raw())  # the start event; then the client goes away
    wait_for(
        lambda: any(
            e["message"] == f"{marker}-unwatched" for e in _logs(server, sandbox_id)["logEntries"]
        ),
        30,
        "the output of a process nobody streams",
    )
    killed = httpx.delete(f"{server.url}/sandboxes/{sandbox_id}", headers=_key(server))
    assert killed.status_code == 204
    after = _logs(server, sandbox_id)["logEntries"]
    assert after[-1]["fields"]["event_type"] == "sandbox_killed"
    assert after[-1]["message"] == "Sandbox killed: killed"
    assert any(e["message"] == f"{marker}-unwatched" for e in after)
    assert _metrics(server, sandbox_id), "an ended sandbox keeps its samples"


def test_logs_are_collected_before_a_pause(server: RunningServer, sandbox: dict[str, Any]) -> None:
    sandbox_id = sandbox["sandboxID"]
    marker = f"paused{time.time_ns()}"
    _sh(server, sandbox, f"echo {marker}")
    paused = httpx.post(f"{server.url}/sandboxes/{sandbox_id}/pause", headers=_key(server))
    assert paused.status_code == 204
    entries = _logs(server, sandbox_id)["logEntries"]
    assert any(e["message"] == marker for e in entries)
    assert entries[-1]["fields"]["event_type"] == "sandbox_paused"
    resumed = httpx.post(
        f"{server.url}/v2/sandboxes/{sandbox_id}/connect", json={}, headers=_key(server)
    )
    assert resumed.status_code == 201
    events = [e["fields"].get("event_type") for e in _logs(server, sandbox_id)["logEntries"]]
    assert events[-1] == "sandbox_resumed"


def test_logs_v2_filters_and_directions(server: RunningServer, sandbox: dict[str, Any]) -> None:
    sandbox_id = sandbox["sandboxID"]
    marker = f"v2{time.time_ns()}"
    _sh(server, sandbox, f"for i in 1 2 3; do echo {marker}-$i; done")
    forward = _logs_v2(server, sandbox_id, search=marker)
    assert [e["message"] for e in forward] == [f"{marker}-1", f"{marker}-2", f"{marker}-3"]
    backward = _logs_v2(server, sandbox_id, search=marker, direction="backward", limit=2)
    assert [e["message"] for e in backward] == [f"{marker}-3", f"{marker}-2"]
    assert all(set(e) == {"timestamp", "level", "message", "fields"} for e in forward)
    cursor = _ms(forward[1]["timestamp"])
    later = _logs_v2(server, sandbox_id, search=marker, cursor=cursor)
    assert {f"{marker}-2", f"{marker}-3"} <= {e["message"] for e in later}
    assert all(_ms(e["timestamp"]) >= cursor for e in later)
    assert _logs_v2(server, sandbox_id, level="warn", search=marker) == []
    assert _logs_v2(server, sandbox_id, limit=0) == []
    url = f"{server.url}/v2/sandboxes/{sandbox_id}/logs"
    for params in (
        {"direction": "sideways"},
        {"level": "loud"},
        {"limit": "1001"},
        {"limit": "-1"},
        {"cursor": "yesterday"},
    ):
        response = httpx.get(url, params=params, headers=_key(server))
        assert response.status_code == 400, (params, response.text)
    v1 = f"{server.url}/sandboxes/{sandbox_id}/logs"
    assert httpx.get(v1, params={"limit": "5000"}, headers=_key(server)).status_code == 400
    recent = _logs(server, sandbox_id, start=cursor)["logEntries"]
    assert recent and all(_ms(e["timestamp"]) >= cursor for e in recent)


def test_a_sandbox_log_is_a_bounded_ring(server: RunningServer, sandbox: dict[str, Any]) -> None:
    sandbox_id = sandbox["sandboxID"]
    _sh(server, sandbox, "seq 1 5000")
    entries = _logs(server, sandbox_id)["logEntries"]
    assert len(entries) <= RING
    messages = [e["message"] for e in entries]
    assert "5000" in messages, "the ring keeps the newest entries"
    assert "1" not in messages


def _ms(stamp: str) -> int:
    return int(datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp() * 1000)


def _start_envelope(command: str) -> bytes:
    payload = json.dumps(
        {"process": {"cmd": "/bin/bash", "args": ["-l", "-c", command]}, "stdin": False}
    ).encode()
    return struct.pack(">BI", 0, len(payload)) + payload


def test_logs_and_metrics_survive_a_gateway_restart(server: RunningServer) -> None:
    """Runs last in the module: it restarts the module's server."""
    created = create(server.url, server.api_key, timeout=300)
    sandbox_id = created["sandboxID"]
    marker = f"restart{time.time_ns()}"
    _sh(server, created, f"echo {marker}-before")
    assert any(e["message"] == f"{marker}-before" for e in _logs(server, sandbox_id)["logEntries"])
    samples_before = len(_metrics(server, sandbox_id))
    server.kill()  # as a crash would
    server.start()
    _sh(server, created, f"echo {marker}-after")
    messages = [e["message"] for e in _logs(server, sandbox_id)["logEntries"]]
    assert messages.count(f"{marker}-before") == 1, "collection resumes where it stopped"
    assert messages.count(f"{marker}-after") == 1
    assert len(_metrics(server, sandbox_id)) >= samples_before
    httpx.delete(f"{server.url}/sandboxes/{sandbox_id}", headers=_key(server))
