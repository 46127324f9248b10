"""Lifecycle against real runtimes: restart survival, the reaper, nothing left behind, quotas.

Tests taking ``runtime_server``/``runtime_view`` run once per runtime (docker, bwrap); the
others are about Docker or about the control plane and run on the default server."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import Any

import httpx
import pytest

from sandgate.runtimes._tmpfs import tmpfs_at
from sandgate.sandboxes.publish import STAGING
from tests.fixtures.runtimes import RuntimeView
from tests.fixtures.server import RunningServer, ServerFactory
from tests.framework.envd import create, run
from tests.framework.sandbox_http import FLAG_END, Envelopes, open_sandbox

docker_only = pytest.mark.docker


def _info(server: RunningServer, sandbox_id: str) -> httpx.Response:
    return httpx.get(f"{server.url}/sandboxes/{sandbox_id}", headers={"X-API-Key": server.api_key})


def _wait_until(condition, timeout: float, what: str) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.1)


def test_kill_leaves_nothing_behind(
    runtime_server: RunningServer, runtime_view: RuntimeView
) -> None:
    created = create(runtime_server.url, runtime_server.api_key)
    sandbox_id = created["sandboxID"]
    result = run(runtime_server.url, sandbox_id, created["envdAccessToken"], "echo alive")
    assert result.stdout == "alive\n"
    host_dir = runtime_server.home / "sandboxes" / sandbox_id
    assert host_dir.is_dir() and runtime_view.exists(sandbox_id)
    response = httpx.delete(
        f"{runtime_server.url}/sandboxes/{sandbox_id}",
        headers={"X-API-Key": runtime_server.api_key},
    )
    assert response.status_code == 204
    assert not runtime_view.exists(sandbox_id)
    assert not host_dir.exists()
    assert sandbox_id not in Path("/proc/self/mountinfo").read_text()  # devpts, binds
    assert _info(runtime_server, sandbox_id).status_code == 404
    health = httpx.get(
        f"{runtime_server.url}/health",
        headers={"E2b-Sandbox-Id": sandbox_id, "E2b-Sandbox-Port": "49983"},
    )
    assert health.status_code == 502
    assert health.json() == {
        "sandboxId": sandbox_id,
        "message": "The sandbox was not found",
        "code": 502,
    }


def test_reaper_kills_expired_sandboxes(
    runtime_server: RunningServer, runtime_view: RuntimeView
) -> None:
    created = create(runtime_server.url, runtime_server.api_key, timeout=2)
    sandbox_id = created["sandboxID"]
    _wait_until(lambda: _info(runtime_server, sandbox_id).status_code == 404, 30, "the reaper")
    # The row reads killed from the moment its kill begins (the store's compare-and-set that
    # makes a kill count once across processes): the runtime's kill and the removal of the
    # sandbox's host directory follow, in that order.
    host_dir = runtime_server.home / "sandboxes" / sandbox_id
    _wait_until(lambda: not runtime_view.exists(sandbox_id), 30, "the runtime kill")
    _wait_until(lambda: not host_dir.exists(), 30, "the host directory's removal")


@docker_only
def test_connect_extends_but_never_shortens(sandgate_server: RunningServer) -> None:
    created = create(sandgate_server.url, sandgate_server.api_key, timeout=600)
    sandbox_id = created["sandboxID"]
    before = datetime.fromisoformat(_info(sandgate_server, sandbox_id).json()["endAt"])
    response = httpx.post(
        f"{sandgate_server.url}/v2/sandboxes/{sandbox_id}/connect",
        json={"timeout": 10},
        headers={"X-API-Key": sandgate_server.api_key},
    )
    assert response.status_code == 200
    assert response.json()["envdAccessToken"] == created["envdAccessToken"]
    after = datetime.fromisoformat(_info(sandgate_server, sandbox_id).json()["endAt"])
    assert after == before
    response = httpx.post(
        f"{sandgate_server.url}/sandboxes/{sandbox_id}/connect",
        json={"timeout": 3600},
        headers={"X-API-Key": sandgate_server.api_key},
    )
    assert response.status_code == 200
    extended = datetime.fromisoformat(_info(sandgate_server, sandbox_id).json()["endAt"])
    assert extended > after


def test_sigkilled_gateway_finds_its_sandboxes_again(
    runtime: str, runtime_server_factory: Callable[..., RunningServer]
) -> None:
    server = runtime_server_factory()
    view = RuntimeView(runtime, server)
    keep = create(server.url, server.api_key, timeout=600)
    frozen = create(server.url, server.api_key, timeout=600)
    assert (
        httpx.post(
            f"{server.url}/sandboxes/{frozen['sandboxID']}/pause",
            headers={"X-API-Key": server.api_key},
        ).status_code
        == 204
    )
    # The short-lived one last, the gateway killed right after: nothing else runs between its
    # create and the kill, however slow the machine is (a create is not bounded in time).
    expire = create(server.url, server.api_key, timeout=10)
    expire_at = datetime.fromisoformat(_info(server, expire["sandboxID"]).json()["endAt"])
    # The sandboxes' runtime files are on a tmpfs of the home's own (runtime.tmpfs), which
    # outlives the gateway: the restarted one finds their sockets where they were.
    runtime_dirs = [server.home / "sandboxes"] + (
        [server.home / "bwrap"] if runtime == "bwrap" else []
    )
    assert all(tmpfs_at(path) for path in runtime_dirs)
    assert (server.home / "sandboxes" / keep["sandboxID"] / "guest.sock").exists()
    server.kill()
    # Let the short-lived sandbox's deadline pass while no gateway runs.
    _wait_until(lambda: datetime.now(expire_at.tzinfo) > expire_at, 30, "the deadline")
    assert view.exists(expire["sandboxID"]), "nothing may reap while the gateway is down"
    assert view.paused(frozen["sandboxID"])
    server.restart()
    assert all(tmpfs_at(path) for path in runtime_dirs)

    result = run(server.url, keep["sandboxID"], keep["envdAccessToken"], "echo still-here")
    assert result.stdout == "still-here\n"
    assert _info(server, keep["sandboxID"]).status_code == 200
    assert _info(server, expire["sandboxID"]).status_code == 404
    assert not view.exists(expire["sandboxID"])
    assert not (server.home / "sandboxes" / expire["sandboxID"]).exists()
    assert _info(server, frozen["sandboxID"]).json()["state"] == "paused"
    resumed = httpx.post(
        f"{server.url}/sandboxes/{frozen['sandboxID']}/connect",
        json={"timeout": 60},
        headers={"X-API-Key": server.api_key},
    )
    assert resumed.status_code == 201
    thawed = run(server.url, frozen["sandboxID"], frozen["envdAccessToken"], "echo thawed")
    assert thawed.stdout == "thawed\n"


@docker_only
def test_quota_per_team_names_the_limit(sandgate_server_factory: ServerFactory) -> None:
    server = sandgate_server_factory(extra_env={"SANDGATE_LIMITS__MAX_SANDBOXES_PER_TEAM": "1"})
    create(server.url, server.api_key)
    response = httpx.post(
        f"{server.url}/v2/sandboxes",
        json={"templateID": "base"},
        headers={"X-API-Key": server.api_key},
    )
    assert response.status_code == 429
    assert "limits.max_sandboxes_per_team" in response.json()["message"]
    assert response.json()["code"] == 429


@docker_only
@pytest.mark.parametrize(
    ("body", "setting"),
    [
        ({"cpuCount": 64}, "limits.max_cpu_count"),
        ({"memoryMB": 10**6}, "limits.max_memory_mb"),
        ({"timeout": 10**9}, "limits.max_timeout_s"),
    ],
)
def test_resource_caps_answer_400(
    sandgate_server: RunningServer, body: dict[str, int], setting: str
) -> None:
    response = httpx.post(
        f"{sandgate_server.url}/v2/sandboxes",
        json={"templateID": "base", **body},
        headers={"X-API-Key": sandgate_server.api_key},
    )
    assert response.status_code == 400
    assert setting in response.json()["message"]


@docker_only
def test_engine_unreachable_is_clear_and_leaves_no_row(
    sandgate_server_factory: ServerFactory, tmp_path: Path
) -> None:
    server = sandgate_server_factory()
    server.stop()
    server.server_env["SANDGATE_RUNTIME"] = "docker"
    server.server_env["DOCKER_HOST"] = f"unix://{tmp_path}/no-docker.sock"
    with pytest.raises(AssertionError, match="Docker engine"):
        server.start()


@docker_only
def test_create_with_engine_gone_leaves_no_row_and_no_directory(tmp_path: Path) -> None:
    import asyncio

    from sandgate.access import Principal, create_api_key
    from sandgate.config import load_config
    from sandgate.errors import RuntimeUnavailable
    from sandgate.guest import build_zipapp
    from sandgate.runtimes.docker import DockerRuntime
    from sandgate.sandboxes import CreateRequest, SandboxService
    from sandgate.sandboxes.catalog import register
    from sandgate.store import Store
    from sandgate.templates import BuiltTemplate

    config = load_config(None, environ={"SANDGATE_HOME": str(tmp_path)})
    store = Store.open(config.store_url)
    register(store, BuiltTemplate("base", "sandgate/template-base:latest", "sha256:x", "d"))
    key, _ = create_api_key(store, "t", "k")
    runtime = DockerRuntime(
        "test",
        state_dir=tmp_path / "docker",
        rootfs_dir=tmp_path / "rootfs",
        base_url=f"unix://{tmp_path}/gone.sock",
    )
    service = SandboxService(
        config,
        store,
        runtime,
        instance_id="test",
        guest_zipapp=build_zipapp(tmp_path / "guest.pyz"),
    )
    request = CreateRequest(template="base", timeout_s=60, metadata={}, envs={})
    with pytest.raises(RuntimeUnavailable, match="Docker engine unreachable"):
        asyncio.run(service.create(Principal(key.team_id, key.id), request))
    assert store.count_live() == 0
    assert store.live_sandboxes() == []
    assert [p for p in (tmp_path / "sandboxes").iterdir() if p.name != STAGING] == []


def test_pause_freezes_and_connect_resumes(
    runtime_server: RunningServer, runtime_view: RuntimeView
) -> None:
    sandgate_server = runtime_server
    created = create(sandgate_server.url, sandgate_server.api_key, timeout=600)
    sandbox_id, token = created["sandboxID"], created["envdAccessToken"]
    run(sandgate_server.url, sandbox_id, token, "echo before > /home/user/state")
    headers = {"X-API-Key": sandgate_server.api_key}
    url = sandgate_server.url
    assert (
        httpx.post(
            f"{url}/sandboxes/{sandbox_id}/pause", json={"memory": True}, headers=headers
        ).status_code
        == 204
    )
    again = httpx.post(f"{url}/sandboxes/{sandbox_id}/pause", json={}, headers=headers)
    assert again.status_code == 409 and "it is paused" in again.json()["message"]
    assert _info(sandgate_server, sandbox_id).json()["state"] == "paused"
    paused = httpx.get(f"{url}/v2/sandboxes", params={"state": "paused"}, headers=headers).json()
    assert sandbox_id in [s["sandboxID"] for s in paused]
    health = httpx.get(
        f"{url}/health", headers={"E2b-Sandbox-Id": sandbox_id, "E2b-Sandbox-Port": "49983"}
    )
    assert health.status_code == 502
    assert runtime_view.paused(sandbox_id)

    resumed = httpx.post(f"{url}/v2/sandboxes/{sandbox_id}/connect", json={}, headers=headers)
    assert resumed.status_code == 201
    assert resumed.json()["envdAccessToken"] == token
    result = run(url, sandbox_id, token, "cat /home/user/state")
    assert result.stdout == "before\n", "memory and files survive a pause"
    assert (
        httpx.post(f"{url}/v2/sandboxes/{sandbox_id}/connect", json={}, headers=headers).status_code
        == 200
    )


def test_lifecycle_and_commands_are_audited(sandgate_server_factory: ServerFactory) -> None:
    server = sandgate_server_factory()
    created = create(server.url, server.api_key, timeout=600)
    sandbox_id, token = created["sandboxID"], created["envdAccessToken"]
    run(server.url, sandbox_id, token, "echo audited-command")
    assert (
        httpx.delete(
            f"{server.url}/sandboxes/{sandbox_id}", headers={"X-API-Key": server.api_key}
        ).status_code
        == 204
    )
    server.stop()  # waits for background audit writes
    records = [
        json.loads(line)
        for line in (server.home / "audit" / "audit.jsonl").read_text().splitlines()
    ]
    mine = [r for r in records if r.get("sandbox") == sandbox_id]
    events = [r["event"] for r in mine]
    assert events.index("sandbox.created") < events.index("command.started")
    assert events.index("command.started") < events.index("sandbox.killed")
    commands = [r for r in mine if r["event"] == "command.started"]
    assert len(commands) == 1
    assert commands[0]["detail"]["command_preview"] == "/bin/bash -l -c echo audited-command"
    assert commands[0]["detail"]["pid"] > 0
    verify = server.cli("audit", "verify")
    assert "records checked" in verify.stdout


def test_streams_of_a_killed_sandbox_drop_as_envds_do(runtime_server: RunningServer) -> None:
    """A command's stream and a watch of a sandbox killed meanwhile end mid-body, with no
    end-of-stream envelope (envd's machine is gone), and ``/health`` then answers 502: that is
    what makes every SDK report "The sandbox was killed or reached its end of life" rather than
    a generic timeout (tests/compat ``test_data_plane_details``). The server logs the drop as a
    decision, not as a failure."""
    sbx = open_sandbox(runtime_server.url, runtime_server.api_key)
    log_before = len(runtime_server.log_text())
    splitters = [Envelopes(), Envelopes()]
    with (
        sbx.stream(
            "process.Process/Start",
            {"process": {"cmd": "/bin/bash", "args": ["-l", "-c", "sleep 120"]}, "stdin": False},
            headers={"connect-timeout-ms": "0"},
        ) as command,
        sbx.stream("filesystem.Filesystem/WatchDir", {"path": "/home/user"}) as watch,
    ):
        received: list[list[tuple[int, dict[str, Any]]]] = [[], []]
        chunks = [command.iter_raw(), watch.iter_raw()]
        for index, stream in enumerate(chunks):
            while not received[index]:
                received[index] += splitters[index].feed(next(stream))
        assert "start" in received[0][0][1]["event"] and "start" in received[1][0][1]
        killed = httpx.delete(
            f"{runtime_server.url}/sandboxes/{sbx.sandbox_id}",
            headers={"X-API-Key": runtime_server.api_key},
        )
        assert killed.status_code == 204
        for index, stream in enumerate(chunks):
            with pytest.raises(httpx.RemoteProtocolError):
                for chunk in stream:
                    received[index] += splitters[index].feed(chunk)
            assert not [flags for flags, _ in received[index] if flags & FLAG_END], received
    health = httpx.get(
        f"{runtime_server.url}/health",
        headers={"E2b-Sandbox-Id": sbx.sandbox_id, "E2b-Sandbox-Port": "49983"},
    )
    assert health.status_code == 502
    log = runtime_server.log_text()[log_before:]
    assert log.count("e2b.stream_dropped") == 2, log
    assert "Exception in ASGI application" not in log and "Traceback" not in log, log
