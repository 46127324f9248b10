"""Snapshots, forks and pause to disk against real runtimes (raw HTTP; the SDK view is
tests/compat/test_snapshots.py): crash survival, what a pause to disk frees, reboot-resume,
saves of paused sandboxes, names, and the errors bad calls get."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest

from sandgate.guest.protocol import EGRESS_PROXY_PORT
from tests.fixtures.runtimes import RuntimeView
from tests.fixtures.server import RunningServer
from tests.framework.envd import create, run

STAGE = Path("/run/sandgate-rt/stage")


def _h(server: RunningServer) -> dict[str, str]:
    return {"X-API-Key": server.api_key}


def _post(server: RunningServer, path: str, body: Any = None) -> httpx.Response:
    return httpx.post(f"{server.url}{path}", json=body, headers=_h(server), timeout=120)


def _state(server: RunningServer, sandbox_id: str) -> str:
    return str(
        httpx.get(f"{server.url}/sandboxes/{sandbox_id}", headers=_h(server)).json()["state"]
    )


def test_saves_and_disk_paused_sandboxes_survive_a_gateway_crash(
    runtime: str, runtime_server_factory: Callable[..., RunningServer]
) -> None:
    server = runtime_server_factory()
    view = RuntimeView(runtime, server)
    source = create(server.url, server.api_key, timeout=600, envVars={"FOO": "bar"})
    sid, token = source["sandboxID"], source["envdAccessToken"]
    assert run(server.url, sid, token, "echo saved > /home/user/a.txt").exit_code == 0
    saved = _post(server, f"/sandboxes/{sid}/snapshots", {"name": "kept"})
    assert saved.status_code == 201, saved.text
    assert _post(server, f"/sandboxes/{sid}/pause", {"memory": False}).status_code == 204
    saves = server.home / "snapshots"
    before = sorted(p.name for p in saves.iterdir())
    assert len(before) == 2  # the snapshot and the paused sandbox's layer
    # The operator's view: both saves with their sizes, and the sandbox as stored.
    listed_saves = [
        json.loads(line) for line in server.cli("snapshots", "list", "--json").stdout.splitlines()
    ]
    assert sorted((r["kind"], r["name"]) for r in listed_saves) == [
        ("pause", None),
        ("snapshot", "kept:default"),
    ]
    assert sorted(r["id"] for r in listed_saves) == before and all(
        r["bytes"] > 0 for r in listed_saves
    )
    sandboxes = [
        json.loads(line) for line in server.cli("sandbox", "list", "--json").stdout.splitlines()
    ]
    assert {"id": sid, "state": "stored"}.items() <= next(
        r for r in sandboxes if r["id"] == sid
    ).items()

    server.kill()
    # What a crash mid-save leaves: a partial directory, and files no row names.
    (saves / ".partial-crashed").mkdir()
    (saves / ".partial-crashed" / "layer.tar").write_bytes(b"half")
    (saves / "orphanorphanorphan00").mkdir()
    server.restart()

    assert sorted(p.name for p in saves.iterdir()) == before
    assert _state(server, sid) == "paused" and not view.exists(sid)
    listed = httpx.get(f"{server.url}/snapshots", headers=_h(server)).json()
    assert [item["snapshotID"] for item in listed] == [saved.json()["snapshotID"]]

    restored = create(server.url, server.api_key, templateID="kept")
    out = run(
        server.url,
        restored["sandboxID"],
        restored["envdAccessToken"],
        "cat /home/user/a.txt; echo $FOO",
    )
    assert out.stdout == "saved\nbar\n", out
    resumed = _post(server, f"/v2/sandboxes/{sid}/connect", {"timeout": 60})
    assert resumed.status_code == 201, resumed.text
    assert resumed.json()["envdAccessToken"] == token
    again = run(server.url, sid, token, "cat /home/user/a.txt; echo $FOO")
    assert again.stdout == "saved\nbar\n", again
    # Resumed: its saved layer is given back; the snapshot stays.
    after = [p.name for p in saves.iterdir()]
    assert len(after) == 1 and after[0] in before, (before, after)


def test_pause_to_disk_frees_the_sandbox_and_reboot_resumes_a_frozen_one(
    runtime_server: RunningServer, runtime_view: RuntimeView
) -> None:
    server = runtime_server
    created = create(server.url, server.api_key, timeout=300, envVars={"FOO": "bar"})
    sid, token = created["sandboxID"], created["envdAccessToken"]
    # The caller's variable and the hooks' (the egress proxy's, the tool gateway's), which
    # reach a guest booted again from its files once its hooks have attached.
    envs = 'printf \'%s|%s|%s\\n\' "$FOO" "$HTTPS_PROXY" "$PYTHONPATH"'
    expected_envs = f"bar|http://127.0.0.1:{EGRESS_PROXY_PORT}|/run/sandgate/tools/python\n"
    # Run inside the sandbox: pgrep sees only its own pid namespace, never the host's sleepers.
    probe = "cat /home/user/n.txt; pgrep -x sleep >/dev/null && echo sleeping || echo no-sleep"
    try:
        assert (
            run(server.url, sid, token, "echo n > /home/user/n.txt; (sleep 999 &)").exit_code == 0
        )
        # on_resume="reboot": a frozen sandbox comes back from its files only.
        assert _post(server, f"/sandboxes/{sid}/pause", {"memory": True}).status_code == 204
        rebooted = _post(server, f"/v2/sandboxes/{sid}/connect", {"memory": False})
        assert rebooted.status_code == 201, rebooted.text
        assert run(server.url, sid, token, probe).stdout == "n\nno-sleep\n"

        assert len(runtime_view.uid_claims(sid)) == 1
        assert _post(server, f"/sandboxes/{sid}/pause", {"memory": False}).status_code == 204
        assert not runtime_view.exists(sid)
        assert not (STAGE / sid).exists()
        assert sid not in Path("/proc/self/mountinfo").read_text()
        assert runtime_view.uid_claims(sid) == []  # its uid range is free
        health = httpx.get(
            f"{server.url}/health", headers={"E2b-Sandbox-Id": sid, "E2b-Sandbox-Port": "49983"}
        )
        assert health.status_code == 502
        listed = httpx.get(
            f"{server.url}/v2/sandboxes", params={"state": "paused"}, headers=_h(server)
        ).json()
        assert sid in [item["sandboxID"] for item in listed]
        running = httpx.get(
            f"{server.url}/v2/sandboxes", params={"state": "running"}, headers=_h(server)
        ).json()
        assert sid not in [item["sandboxID"] for item in running]

        resumed = _post(server, f"/sandboxes/{sid}/connect", {"timeout": 60})
        assert resumed.status_code == 201, resumed.text
        assert runtime_view.exists(sid)
        assert run(server.url, sid, token, probe).stdout == "n\nno-sleep\n"
        assert run(server.url, sid, token, envs).stdout == expected_envs
    finally:
        httpx.delete(f"{server.url}/sandboxes/{sid}", headers=_h(server))


def test_saves_of_paused_sandboxes_leave_them_paused(
    runtime_server: RunningServer, runtime_view: RuntimeView
) -> None:
    server = runtime_server
    created = create(server.url, server.api_key, timeout=300)
    sid, token = created["sandboxID"], created["envdAccessToken"]
    made: list[str] = [sid]
    snapshots: list[str] = []
    try:
        assert run(server.url, sid, token, "echo p > /home/user/p.txt").exit_code == 0
        for memory in (True, False):
            assert _post(server, f"/sandboxes/{sid}/pause", {"memory": memory}).status_code == 204
            saved = _post(server, f"/sandboxes/{sid}/snapshots", {})
            assert saved.status_code == 201, saved.text
            snapshots.append(saved.json()["snapshotID"])
            assert _state(server, sid) == "paused"
            if memory:
                assert runtime_view.paused(sid)
            forked = _post(server, f"/sandboxes/{sid}/fork", {"count": 1, "timeout": 60})
            assert forked.status_code == 201, forked.text
            fork = forked.json()[0]["sandbox"]
            made.append(fork["sandboxID"])
            out = run(
                server.url, fork["sandboxID"], fork["envdAccessToken"], "cat /home/user/p.txt"
            )
            assert out.stdout == "p\n", out
            assert _state(server, sid) == "paused"
            resumed = _post(server, f"/sandboxes/{sid}/connect", {"timeout": 60})
            assert resumed.status_code == 201
        for snapshot_id in snapshots:
            restored = create(server.url, server.api_key, templateID=snapshot_id)
            made.append(restored["sandboxID"])
            out = run(
                server.url,
                restored["sandboxID"],
                restored["envdAccessToken"],
                "cat /home/user/p.txt",
            )
            assert out.stdout == "p\n", out
    finally:
        for snapshot_id in snapshots:
            httpx.delete(f"{server.url}/templates/{snapshot_id}", headers=_h(server))
        for made_id in made:
            httpx.delete(f"{server.url}/sandboxes/{made_id}", headers=_h(server))


def test_a_name_moves_to_its_newest_snapshot(runtime_server: RunningServer) -> None:
    server = runtime_server
    created = create(server.url, server.api_key, timeout=300)
    sid, token = created["sandboxID"], created["envdAccessToken"]
    made = [sid]
    try:
        ids = []
        for version in ("one", "two"):
            assert run(server.url, sid, token, f"echo {version} > /home/user/v").exit_code == 0
            saved = _post(server, f"/sandboxes/{sid}/snapshots", {"name": "moving:v1"})
            assert saved.status_code == 201, saved.text
            ids.append(saved.json()["snapshotID"])
        assert ids[0] == ids[1] and ids[0].endswith("/moving:v1")
        listed = httpx.get(
            f"{server.url}/snapshots", params={"name": "moving"}, headers=_h(server)
        ).json()
        assert [item["snapshotID"] for item in listed] == [ids[1]]
        assert len(list((server.home / "snapshots").iterdir())) >= 1
        restored = create(server.url, server.api_key, templateID="moving:v1")
        made.append(restored["sandboxID"])
        out = run(
            server.url, restored["sandboxID"], restored["envdAccessToken"], "cat /home/user/v"
        )
        assert out.stdout == "two\n", out
    finally:
        httpx.delete(f"{server.url}/templates/moving:v1", headers=_h(server))
        for made_id in made:
            httpx.delete(f"{server.url}/sandboxes/{made_id}", headers=_h(server))


@pytest.mark.parametrize(
    ("path", "body", "status", "words"),
    [
        (
            "/v2/sandboxes",
            {"templateID": "base", "autoResume": {"enabled": True}},
            400,
            "autoResume needs autoPause",
        ),
        (
            "/v2/sandboxes",
            {
                "templateID": "base",
                "autoPause": True,
                "autoPauseMemory": False,
                "autoResume": {"enabled": True},
            },
            400,
            "autoPauseMemory=false",
        ),
        ("/v2/sandboxes", {"templateID": "base", "autoPause": "yes"}, 400, ""),
        ("/sandboxes/{sid}/fork", {"count": 0}, 400, "between 1 and 20"),
        ("/sandboxes/{sid}/fork", {"count": 21}, 400, "between 1 and 20"),
        ("/sandboxes/{sid}/fork", {"count": "2"}, 400, ""),
        ("/sandboxes/{sid}/snapshots", {"name": "Bad Name!"}, 400, "invalid snapshot name"),
        ("/sandboxes/{sid}/snapshots", {"name": "base"}, 409, "a template is named 'base'"),
        ("/sandboxes/{sid}/pause", {"memory": "false"}, 400, ""),
        ("/sandboxes/nosuchsandbox/snapshots", {}, 404, "not found"),
        ("/sandboxes/nosuchsandbox/fork", {}, 404, "not found"),
    ],
)
def test_bad_calls_get_clear_errors_and_change_nothing(
    runtime_server: RunningServer,
    runtime_sandbox: dict[str, Any],
    path: str,
    body: dict[str, Any],
    status: int,
    words: str,
) -> None:
    sid = runtime_sandbox["sandboxID"]
    saves = runtime_server.home / "snapshots"
    before = sorted(p.name for p in saves.iterdir()) if saves.is_dir() else []
    response = _post(runtime_server, path.format(sid=sid), body)
    assert response.status_code == status, response.text
    error = response.json()
    assert error["code"] == status and words in error["message"], error
    assert _state(runtime_server, sid) == "running"
    after = sorted(p.name for p in saves.iterdir()) if saves.is_dir() else []
    assert after == before


def test_snapshot_listing_pages_and_refuses_bad_cursors(runtime_server: RunningServer) -> None:
    server = runtime_server
    created = create(server.url, server.api_key, timeout=300)
    sid = created["sandboxID"]
    made: list[str] = []
    try:
        for _ in range(3):
            saved = _post(server, f"/sandboxes/{sid}/snapshots", {})
            assert saved.status_code == 201
            made.append(saved.json()["snapshotID"])
        seen: list[str] = []
        token: str | None = None
        for _ in range(5):
            params: dict[str, Any] = {"sandboxID": sid, "limit": 1}
            if token:
                params["nextToken"] = token
            page = httpx.get(f"{server.url}/snapshots", params=params, headers=_h(server))
            assert page.status_code == 200
            seen += [item["snapshotID"] for item in page.json()]
            token = page.headers.get("x-next-token")
            if not token:
                break
        assert seen == list(reversed(made))  # newest first, each once
        bad = httpx.get(
            f"{server.url}/snapshots", params={"nextToken": "garbage"}, headers=_h(server)
        )
        assert bad.status_code == 400 and "nextToken" in bad.json()["message"]
        for limit in ("0", "101", "x"):
            refused = httpx.get(
                f"{server.url}/snapshots", params={"limit": limit}, headers=_h(server)
            )
            assert refused.status_code == 400, (limit, refused.text)
    finally:
        for snapshot_id in made:
            httpx.delete(f"{server.url}/templates/{snapshot_id}", headers=_h(server))
        httpx.delete(f"{server.url}/sandboxes/{sid}", headers=_h(server))


def test_each_fork_succeeds_or_fails_on_its_own(
    runtime_server_factory: Callable[..., RunningServer],
) -> None:
    server = runtime_server_factory(extra_env={"SANDGATE_LIMITS__MAX_SANDBOXES_PER_TEAM": "3"})
    source = create(server.url, server.api_key, timeout=300, metadata={"role": "source"})
    sid, token = source["sandboxID"], source["envdAccessToken"]
    assert run(server.url, sid, token, "echo f > /home/user/f").exit_code == 0
    forked = _post(server, f"/sandboxes/{sid}/fork", {"count": 4, "timeout": 60})
    assert forked.status_code == 201, forked.text
    entries = forked.json()
    started = [entry["sandbox"] for entry in entries if "sandbox" in entry]
    refused = [entry["error"] for entry in entries if "error" in entry]
    assert len(started) == 2 and len(refused) == 2, entries
    for error in refused:
        assert error["code"] == 429 and "limits.max_sandboxes_per_team" in error["message"]
    for fork in started:
        out = run(server.url, fork["sandboxID"], fork["envdAccessToken"], "cat /home/user/f")
        assert out.stdout == "f\n", out
        info = httpx.get(f"{server.url}/sandboxes/{fork['sandboxID']}", headers=_h(server))
        assert info.json()["metadata"] == {"role": "source"}
    # The shared capture is given back once the forks started.
    assert list((server.home / "snapshots").iterdir()) == []
    assert _state(server, sid) == "running"
