"""The last of E2B's surface (issue 13: no ❌ rows left), on docker and on bwrap: sandbox
refreshes, teams and team metrics on the control plane; envd's ``/files/compose``,
``/metrics`` and ``/init`` on the data plane. Contract: shared/e2b-protocol.md §2.3, §3.5 and
the SDKs' generated clients (``SandboxRefreshRequest``, ``Team``, ``TeamMetric``,
``MaxTeamMetric``, envd's ``ComposeRequest``/``Metrics``).
"""

from __future__ import annotations

import json
import secrets
import time
from collections.abc import Iterator
from datetime import datetime
from typing import Any

import httpx
import pytest

from tests.fixtures.egress import records_once
from tests.fixtures.server import RunningServer
from tests.framework.envd import create, envd_headers, run

MIB = 1024 * 1024
DISK_MIB = 256


@pytest.fixture(scope="module")
def server(runtime: str, runtime_server_factory: Any) -> RunningServer:
    started: RunningServer = runtime_server_factory(
        extra_env={"SANDGATE_LIMITS__DISK_MIB": str(DISK_MIB)}
    )
    return started


@pytest.fixture
def sandbox(server: RunningServer) -> Iterator[dict[str, Any]]:
    created = create(server.url, server.api_key, timeout=60)
    yield created
    httpx.delete(f"{server.url}/sandboxes/{created['sandboxID']}", headers=_key(server))


def _key(server: RunningServer, key: str | None = None) -> dict[str, str]:
    return {"X-API-Key": key or server.api_key}


def _new_team(server: RunningServer) -> tuple[str, str]:
    """(team id, key) of a fresh team with one full key."""
    name = "t" + secrets.token_hex(4)
    out = server.cli("keys", "create", "--name", name, "--team", name, "--json")
    made = json.loads([line for line in out.stdout.splitlines() if line.startswith("{")][-1])
    return str(made["team"]), str(made["key"])


def _end_at(server: RunningServer, sandbox_id: str, key: str | None = None) -> float:
    info = httpx.get(f"{server.url}/sandboxes/{sandbox_id}", headers=_key(server, key))
    assert info.status_code == 200, info.text
    return datetime.fromisoformat(info.json()["endAt"].replace("Z", "+00:00")).timestamp()


def _refresh(server: RunningServer, sandbox_id: str, body: Any, key: str | None = None) -> Any:
    return httpx.post(
        f"{server.url}/sandboxes/{sandbox_id}/refreshes", json=body, headers=_key(server, key)
    )


def _envd(sandbox: dict[str, Any], token: str | None = "") -> dict[str, str]:
    return envd_headers(sandbox["sandboxID"], sandbox["envdAccessToken"] if token == "" else token)


# -- refreshes ------------------------------------------------------------------------------


def test_refresh_extends_a_sandboxs_life_and_never_shortens_it(
    server: RunningServer, sandbox: dict[str, Any]
) -> None:
    sandbox_id = sandbox["sandboxID"]
    first = _end_at(server, sandbox_id)
    before = time.time()
    assert _refresh(server, sandbox_id, {"duration": 600}).status_code == 204
    extended = _end_at(server, sandbox_id)
    assert before + 600 - 2 <= extended <= time.time() + 600 + 2
    assert extended > first

    # Shorter than what is left, and the default (15 s): the end stays where it was.
    assert _refresh(server, sandbox_id, {"duration": 30}).status_code == 204
    assert _refresh(server, sandbox_id, {}).status_code == 204
    assert (
        httpx.post(
            f"{server.url}/sandboxes/{sandbox_id}/refreshes", headers=_key(server)
        ).status_code
        == 204
    ), "the body is optional"
    assert _end_at(server, sandbox_id) == extended

    for bad in ({"duration": 3601}, {"duration": -1}, {"duration": "60"}, {"duration": 1.5}):
        refused = _refresh(server, sandbox_id, bad)
        assert refused.status_code == 400, (bad, refused.text)
        assert refused.json()["code"] == 400
    assert (
        "between 0 and 3600" in _refresh(server, sandbox_id, {"duration": 3601}).json()["message"]
    )
    assert _end_at(server, sandbox_id) == extended, "a refused refresh changes nothing"


def test_refresh_of_a_short_sandbox_gives_it_at_least_15_seconds(server: RunningServer) -> None:
    created = create(server.url, server.api_key, timeout=2)
    sandbox_id = created["sandboxID"]
    try:
        asked = time.time()
        assert _refresh(server, sandbox_id, {"duration": 0}).status_code == 204
        assert _end_at(server, sandbox_id) >= asked + 15 - 1
    finally:
        httpx.delete(f"{server.url}/sandboxes/{sandbox_id}", headers=_key(server))


def test_refresh_of_an_unknown_or_foreign_sandbox_is_not_found(
    server: RunningServer, sandbox: dict[str, Any]
) -> None:
    _, other_key = _new_team(server)
    foreign = _refresh(server, sandbox["sandboxID"], {"duration": 60}, key=other_key)
    unknown = _refresh(server, "nosuch0sandbox", {"duration": 60})
    for response, sandbox_id in ((foreign, sandbox["sandboxID"]), (unknown, "nosuch0sandbox")):
        assert response.status_code == 404
        assert response.json()["message"].startswith(f"sandbox '{sandbox_id}' not found")
    # Exactly what the other per-sandbox routes answer: nothing tells "someone else's".
    info = httpx.get(
        f"{server.url}/sandboxes/{sandbox['sandboxID']}", headers=_key(server, other_key)
    )
    assert foreign.json() == info.json()
    assert httpx.post(f"{server.url}/sandboxes/x/refreshes", json={}).status_code == 401


def test_refresh_and_set_timeout_are_audited(server: RunningServer) -> None:
    created = create(server.url, server.api_key, timeout=60)
    sandbox_id = created["sandboxID"]
    assert _refresh(server, sandbox_id, {"duration": 120}).status_code == 204
    timeout = httpx.post(
        f"{server.url}/sandboxes/{sandbox_id}/timeout", json={"timeout": 90}, headers=_key(server)
    )
    assert timeout.status_code == 204
    httpx.delete(f"{server.url}/sandboxes/{sandbox_id}", headers=_key(server))
    # Audit records are written in the background: wait for them, not for a server stop.
    refreshed = records_once(server, sandbox_id, "sandbox.refreshed", bool, timeout_s=60)
    timed = records_once(server, sandbox_id, "sandbox.timeout_set", bool, timeout_s=60)
    assert len(refreshed) == 1 and len(timed) == 1
    assert refreshed[0]["detail"]["duration_s"] == 120
    assert timed[0]["detail"]["timeout_s"] == 90
    assert refreshed[0]["subject"]["team"] == timed[0]["subject"]["team"]
    assert refreshed[0]["outcome"] == "ok"


# -- teams -------------------------------------------------------------------------------------


def test_teams_lists_the_keys_own_team_only(server: RunningServer) -> None:
    team_a, key_a = _new_team(server)
    team_b, key_b = _new_team(server)
    for team, key in ((team_a, key_a), (team_b, key_b)):
        listed = httpx.get(f"{server.url}/teams", headers=_key(server, key))
        assert listed.status_code == 200
        assert listed.json() == [
            {"teamID": team, "name": listed.json()[0]["name"], "apiKey": key, "isDefault": True}
        ]
        assert listed.json()[0]["name"]
    assert team_a != team_b
    assert httpx.get(f"{server.url}/teams").status_code == 401
    wrong = httpx.get(f"{server.url}/teams", headers={"X-API-Key": "e2b_" + "0" * 40})
    assert wrong.status_code == 401


# -- team metrics -----------------------------------------------------------------------------


def test_team_metrics_count_the_teams_sandboxes(server: RunningServer) -> None:
    team, key = _new_team(server)
    start = int(time.time()) - 1
    first = create(server.url, key, timeout=120)
    second = create(server.url, key, timeout=120)
    assert (
        httpx.delete(
            f"{server.url}/sandboxes/{first['sandboxID']}", headers=_key(server, key)
        ).status_code
        == 204
    )
    end = int(time.time()) + 1
    try:
        params = {"start": start, "end": end}
        series = httpx.get(
            f"{server.url}/teams/{team}/metrics", params=params, headers=_key(server, key)
        )
        assert series.status_code == 200, series.text
        points = series.json()
        assert points, "a range always has at least one step"
        step = points[1]["timestampUnix"] - points[0]["timestampUnix"] if len(points) > 1 else 5
        assert points[0]["timestampUnix"] == start
        for point in points:
            assert set(point) == {
                "concurrentSandboxes",
                "sandboxStartRate",
                "timestamp",
                "timestampUnix",
            }
            assert point["timestamp"].endswith("Z")
        assert max(p["concurrentSandboxes"] for p in points) == 2
        assert points[-1]["concurrentSandboxes"] >= 1
        started = sum(p["sandboxStartRate"] * step for p in points)
        assert round(started) == 2, points

        for metric, expected in (("concurrent_sandboxes", 2), ("sandbox_start_rate", None)):
            most = httpx.get(
                f"{server.url}/teams/{team}/metrics/max",
                params={**params, "metric": metric},
                headers=_key(server, key),
            )
            assert most.status_code == 200, most.text
            body = most.json()
            assert set(body) == {"timestamp", "timestampUnix", "value"}
            assert start <= body["timestampUnix"] <= end
            if expected is not None:
                assert body["value"] == expected
            else:
                assert body["value"] == max(p["sandboxStartRate"] for p in points) > 0

        # Another team's view of the same moments: none of these sandboxes.
        other_team, other_key = _new_team(server)
        theirs = httpx.get(
            f"{server.url}/teams/{other_team}/metrics",
            params=params,
            headers=_key(server, other_key),
        )
        assert theirs.status_code == 200
        assert all(p["concurrentSandboxes"] == 0 for p in theirs.json())
        assert all(p["sandboxStartRate"] == 0 for p in theirs.json())
    finally:
        httpx.delete(f"{server.url}/sandboxes/{second['sandboxID']}", headers=_key(server, key))


def test_team_metrics_refuse_other_teams_and_bad_parameters(server: RunningServer) -> None:
    team, key = _new_team(server)
    other_team, _ = _new_team(server)
    headers = _key(server, key)
    for path in ("metrics", "metrics/max?metric=concurrent_sandboxes"):
        for foreign in (other_team, "nosuchteam"):
            refused = httpx.get(f"{server.url}/teams/{foreign}/{path}", headers=headers)
            assert refused.status_code == 403, refused.text
            assert "is not your API key's team" in refused.json()["message"]
    cases = {
        "metrics?start=abc": "start",
        "metrics?start=100&end=50": "must not be after end",
        "metrics?start=-5": "unix times",
        f"metrics?start=0&end={32 * 86400}": "longer than 31 days",
        "metrics/max": "metric must be one of concurrent_sandboxes, sandbox_start_rate",
        "metrics/max?metric=cpu": "metric must be one of",
    }
    for query, message in cases.items():
        refused = httpx.get(f"{server.url}/teams/{team}/{query}", headers=headers)
        assert refused.status_code == 400, (query, refused.text)
        assert message in refused.json()["message"], (query, refused.text)
    assert httpx.get(f"{server.url}/teams/{team}/metrics").status_code == 401


# -- envd: /files/compose -----------------------------------------------------------------------


def _upload(server: RunningServer, sandbox: dict[str, Any], path: str, data: bytes) -> None:
    response = httpx.post(
        f"{server.url}/files",
        params={"path": path},
        content=data,
        headers={**_envd(sandbox), "content-type": "application/octet-stream"},
    )
    assert response.status_code == 200, response.text


def _download(server: RunningServer, sandbox: dict[str, Any], path: str) -> httpx.Response:
    return httpx.get(f"{server.url}/files", params={"path": path}, headers=_envd(sandbox))


def _compose(server: RunningServer, sandbox: dict[str, Any], body: Any) -> httpx.Response:
    return httpx.post(f"{server.url}/files/compose", json=body, headers=_envd(sandbox))


def _sh(
    server: RunningServer, sandbox: dict[str, Any], command: str, user: str | None = None
) -> str:
    result = run(server.url, sandbox["sandboxID"], sandbox["envdAccessToken"], command, user=user)
    assert result.exit_code == 0, result
    return result.stdout


def test_compose_concatenates_the_sources_as_the_user(
    server: RunningServer, sandbox: dict[str, Any]
) -> None:
    parts = [b"alpha-", secrets.token_bytes(3 * MIB), b"-omega\n"]
    for index, data in enumerate(parts):
        _upload(server, sandbox, f"/home/user/part{index}", data)
    composed = _compose(
        server,
        sandbox,
        {
            "source_paths": ["/home/user/part0", "part1", "/home/user/part2"],
            "destination": "/home/user/out/whole.bin",
        },
    )
    assert composed.status_code == 200, composed.text
    assert composed.json() == {
        "path": "/home/user/out/whole.bin",
        "name": "whole.bin",
        "type": "file",
    }
    assert _download(server, sandbox, "/home/user/out/whole.bin").content == b"".join(parts)
    assert _sh(server, sandbox, "stat -c %U /home/user/out/whole.bin") == "user\n"
    for index in range(3):
        assert _download(server, sandbox, f"/home/user/part{index}").status_code == 404, (
            "envd deletes the sources once composed"
        )

    _upload(server, sandbox, "/tmp/r1", b"one")
    as_root = _compose(
        server,
        sandbox,
        {"source_paths": ["/tmp/r1", "/tmp/r1"], "destination": "/root/r", "username": "root"},
    )
    assert as_root.status_code == 200, as_root.text
    assert _sh(server, sandbox, "stat -c %U /root/r; cat /root/r", user="root") == "root\noneone"


def test_compose_errors_leave_everything_as_it_was(
    server: RunningServer, sandbox: dict[str, Any]
) -> None:
    _upload(server, sandbox, "/home/user/a", b"aaa")
    _upload(server, sandbox, "/home/user/dest", b"untouched")
    locked = "/home/user/locked"
    _sh(server, sandbox, f"echo secret > {locked}; chmod 600 {locked}", user="root")
    _sh(server, sandbox, "mkdir -p /home/user/adir")

    def refused(body: Any, status: int, message: str) -> None:
        response = _compose(server, sandbox, body)
        assert response.status_code == status, (body, response.text)
        assert message in response.json()["message"], (body, response.text)
        assert _download(server, sandbox, "/home/user/dest").content == b"untouched"
        assert _download(server, sandbox, "/home/user/a").content == b"aaa"

    dest = "/home/user/dest"
    refused({"source_paths": ["/home/user/a", "/home/user/missing"], "destination": dest}, 404, "")
    refused(
        {"source_paths": ["/home/user/a", "/home/user/adir"], "destination": dest},
        400,
        "not a regular file",
    )
    refused({"source_paths": [], "destination": dest}, 400, "source_paths must be a non-empty list")
    refused({"source_paths": ["/home/user/a"]}, 400, "destination must be a non-empty path")
    refused({"source_paths": ["/home/user/a", 7], "destination": dest}, 400, "source_paths entry")
    refused({"source_paths": ["/home/user/a\x00x"], "destination": dest}, 400, "NUL")
    refused(
        {"source_paths": ["/home/user/a"], "destination": dest, "username": "Bad User"},
        401,
        "invalid username",
    )
    refused(["/home/user/a"], 400, "JSON object")
    # The first source is streamed into the upload before the second turns out unreadable:
    # the half-written destination is never put in place.
    refused({"source_paths": ["/home/user/a", locked], "destination": dest}, 403, "")
    bad_json = httpx.post(
        f"{server.url}/files/compose", content=b"{not json", headers=_envd(sandbox)
    )
    assert bad_json.status_code == 400
    leftovers = _sh(
        server, sandbox, "find /home/user -newer /home/user/dest -type f ! -name locked | wc -l"
    )
    assert leftovers.strip() == "0", "no temp file is left behind"
    no_token = httpx.post(
        f"{server.url}/files/compose",
        json={"source_paths": ["/home/user/a"], "destination": dest},
        headers=_envd(sandbox, token=None),
    )
    assert no_token.status_code == 401


# -- envd: /metrics and /init ---------------------------------------------------------------------


def test_envd_metrics_read_the_sandbox_now(server: RunningServer, sandbox: dict[str, Any]) -> None:
    _sh(server, sandbox, "head -c 20000000 /dev/urandom > /home/user/fill")
    before = time.time()
    response = httpx.get(f"{server.url}/metrics", headers=_envd(sandbox))
    assert response.status_code == 200, response.text
    body = response.json()
    assert set(body) == {
        "ts",
        "cpu_count",
        "cpu_used_pct",
        "mem_total",
        "mem_used",
        "mem_cache",
        "mem_total_mib",
        "mem_used_mib",
        "disk_used",
        "disk_total",
    }
    info = httpx.get(f"{server.url}/sandboxes/{sandbox['sandboxID']}", headers=_key(server)).json()
    assert abs(body["ts"] - before) <= 5
    assert body["cpu_count"] == info["cpuCount"]
    assert 0.0 <= body["cpu_used_pct"] <= 100.0
    assert body["mem_total"] == info["memoryMB"] * MIB
    assert body["mem_total_mib"] == info["memoryMB"]
    assert 0 < body["mem_used"] < body["mem_total"]
    assert body["mem_used_mib"] == body["mem_used"] // MIB
    assert body["disk_total"] == DISK_MIB * MIB
    assert 20_000_000 <= body["disk_used"] < body["disk_total"], "the file written is counted"
    assert httpx.get(f"{server.url}/metrics", headers=_envd(sandbox, token=None)).status_code == 401
    assert (
        httpx.get(f"{server.url}/metrics", headers=_envd(sandbox, token="wrong")).status_code == 401
    )


def test_envd_init_sets_envs_user_and_workdir_for_later_processes(
    server: RunningServer, sandbox: dict[str, Any]
) -> None:
    assert _sh(server, sandbox, "id -un; pwd") == "user\n/home/user\n"
    init = httpx.post(
        f"{server.url}/init",
        json={
            "envVars": {"INIT_VAR": "from-init"},
            "defaultUser": "root",
            "defaultWorkdir": "/tmp",
            "accessToken": "ignored",
            "timestamp": "2026-01-01T00:00:00Z",
        },
        headers=_envd(sandbox),
    )
    assert init.status_code == 204, init.text
    assert _sh(server, sandbox, 'echo "$INIT_VAR"; id -un; pwd') == "from-init\nroot\n/tmp\n"
    assert _sh(server, sandbox, "id -un; pwd", user="user") == "user\n/tmp\n"
    envs = httpx.get(f"{server.url}/envs", headers=_envd(sandbox))
    assert envs.json()["INIT_VAR"] == "from-init"
    # The token stays the gateway's: the old one still works.
    assert httpx.get(f"{server.url}/envs", headers=_envd(sandbox)).status_code == 200

    for bad, message in (
        ({"defaultUser": "nosuchuser"}, "does not exist in the sandbox"),
        ({"defaultUser": "Bad User"}, "not a valid user name"),
        ({"defaultWorkdir": "relative/dir"}, "absolute path"),
        ({"envVars": {"A": 1}}, "envVars must map"),
        ({"envVars": {"A=B": "x"}}, "is not valid"),
    ):
        refused = httpx.post(f"{server.url}/init", json=bad, headers=_envd(sandbox))
        assert refused.status_code == 400, (bad, refused.text)
        assert message in refused.json()["message"], (bad, refused.text)
    assert _sh(server, sandbox, "id -un") == "root\n", "a refused init changes nothing"
    no_token = httpx.post(f"{server.url}/init", json={}, headers=_envd(sandbox, token=None))
    assert no_token.status_code == 401
