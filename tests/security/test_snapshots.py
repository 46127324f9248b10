"""Saved sandbox disks and waking sandboxes, on every runtime (docs/threat-model.md, "Snapshots,
pause to disk, auto-resume": SNAP-02 … SNAP-05; SNAP-01, a hostile archive restored as host
root, is tests/unit/runtimes/test_layer.py).

Why: a snapshot carries one tenant's files into a new sandbox through the host (as root), a
sandbox paused to disk parks them under the gateway's home, and an auto-resume sandbox is
woken by traffic. Each must stay inside its sandbox's uid range, its team and its quota.
"""

from __future__ import annotations

import json
import tarfile
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import httpx
import pytest

from tests.fixtures.runtimes import RuntimeView
from tests.fixtures.server import RunningServer
from tests.framework.envd import create, envd_headers, run
from tests.framework.sandbox_http import wait_for

SNAPSHOT_ROUTES = [
    ("POST", "/sandboxes/abc/snapshots"),
    ("GET", "/snapshots"),
    ("DELETE", "/templates/abc"),
    ("DELETE", "/templates/ns/abc"),
    ("POST", "/sandboxes/abc/fork"),
]
UIDS_PER_SANDBOX = 65536
STAGE = Path("/run/sandgate-rt/stage")
SETTLE_S = 30.0


def _headers(server: RunningServer, key: str | None = None) -> dict[str, str]:
    return {"X-API-Key": key or server.api_key}


def _snapshot(server: RunningServer, sandbox_id: str, **body: Any) -> httpx.Response:
    return httpx.post(
        f"{server.url}/sandboxes/{sandbox_id}/snapshots",
        json=body,
        headers=_headers(server),
        timeout=120,
    )


def _uid_base(sandbox_id: str) -> int:
    return int(json.loads((STAGE / sandbox_id / "stage.json").read_text())["uid_base"])


def _state(server: RunningServer, sandbox_id: str) -> str:
    response = httpx.get(f"{server.url}/sandboxes/{sandbox_id}", headers=_headers(server))
    return str(response.json().get("state"))


@pytest.mark.docker
@pytest.mark.parametrize(("method", "path"), SNAPSHOT_ROUTES)
def test_AUTH_01_every_snapshot_route_needs_a_key(
    sandgate_server: RunningServer, method: str, path: str
) -> None:
    response = httpx.request(method, sandgate_server.url + path, json={})
    assert response.status_code == 401
    assert "E2B_API_KEY" in response.json()["message"]


def test_AUTH_01_the_snapshot_route_list_is_complete() -> None:
    """Fails when a snapshot route is added without being listed (and so tested) above."""
    from sandgate.api.e2b.snapshots import build_snapshots_router

    router = build_snapshots_router(SimpleNamespace(snapshots=None), "x")  # type: ignore[arg-type]
    declared = {(m, r.path) for r in router.routes for m in r.methods}  # type: ignore[attr-defined]
    listed = {
        (m, p.replace("/ns/abc", "/{namespace}/{ref}").replace("templates/abc", "templates/{ref}")
         .replace("abc", "{sandbox_id}"))
        for m, p in SNAPSHOT_ROUTES
    }  # fmt: skip
    assert declared == listed


def test_SNAP_02_restored_files_belong_to_the_new_sandbox_range(
    runtime_server: RunningServer, runtime_sandbox: dict[str, Any]
) -> None:
    source = runtime_sandbox["sandboxID"]
    made = run(
        runtime_server.url,
        source,
        runtime_sandbox["envdAccessToken"],
        "echo mine > /home/user/owned.txt && sudo install -o 4242 -g 4243 /dev/null /opt/odd",
    )
    assert made.exit_code == 0, made
    saved = _snapshot(runtime_server, source)
    assert saved.status_code == 201, saved.text
    snapshot_id = saved.json()["snapshotID"]
    archive = runtime_server.home / "snapshots" / snapshot_id.split(":")[0] / "layer.tar"
    with tarfile.open(archive) as tar:  # stored relative to the range, never as host uids
        members = {m.name: (m.uid, m.gid) for m in tar.getmembers()}
    assert members["home/user/owned.txt"] == (1000, 1000)
    assert members["opt/odd"] == (4242, 4243)
    assert all(uid < UIDS_PER_SANDBOX for uid, _ in members.values())

    restored = create(runtime_server.url, runtime_server.api_key, templateID=snapshot_id)
    try:
        target = restored["sandboxID"]
        base, source_base = _uid_base(target), _uid_base(source)
        assert base != source_base
        upper = STAGE / target / "disk" / "upper"
        owned = (upper / "home" / "user" / "owned.txt").stat()
        assert (owned.st_uid, owned.st_gid) == (base + 1000, base + 1000)
        odd = (upper / "opt" / "odd").stat()
        assert (odd.st_uid, odd.st_gid) == (base + 4242, base + 4243)
        inside = run(
            runtime_server.url,
            target,
            restored["envdAccessToken"],
            "stat -c '%u:%g' /home/user/owned.txt /opt/odd; cat /home/user/owned.txt",
        )
        assert inside.stdout == "1000:1000\n4242:4243\nmine\n", inside
        # The source's range owns nothing in the new sandbox's layer.
        for path in upper.rglob("*"):
            st = path.lstat()
            assert base <= st.st_uid < base + UIDS_PER_SANDBOX, (path, st.st_uid)
    finally:
        httpx.delete(
            f"{runtime_server.url}/sandboxes/{restored['sandboxID']}",
            headers=_headers(runtime_server),
        )
        httpx.delete(
            f"{runtime_server.url}/templates/{snapshot_id}", headers=_headers(runtime_server)
        )


def test_SNAP_03_another_teams_saves_and_sandboxes_look_absent(
    runtime_server: RunningServer, runtime_sandbox: dict[str, Any]
) -> None:
    source = runtime_sandbox["sandboxID"]
    saved = _snapshot(runtime_server, source, name="team-a-only")
    assert saved.status_code == 201, saved.text
    snapshot_id = saved.json()["snapshotID"]
    other = json.loads(
        runtime_server.cli("keys", "create", "--team", "snap-other-team", "--json").stdout
    )["key"]
    theirs = _headers(runtime_server, other)
    url = runtime_server.url
    try:
        assert httpx.get(f"{url}/snapshots", headers=theirs).json() == []
        listed = httpx.get(f"{url}/snapshots", params={"sandboxID": source}, headers=theirs)
        assert listed.status_code == 200 and listed.json() == []
        for ref in (snapshot_id, snapshot_id.split("/", 1)[1], "team-a-only"):
            made = httpx.post(f"{url}/v2/sandboxes", json={"templateID": ref}, headers=theirs)
            assert made.status_code == 404, (ref, made.text)
            gone = httpx.delete(f"{url}/templates/{ref}", headers=theirs)
            assert gone.status_code == 404, (ref, gone.text)
        for path in (f"/sandboxes/{source}/snapshots", f"/sandboxes/{source}/fork"):
            refused = httpx.post(f"{url}{path}", json={}, headers=theirs)
            assert refused.status_code == 404, (path, refused.text)
            assert "not found" in refused.json()["message"]
        paused = httpx.post(
            f"{url}/sandboxes/{source}/pause", json={"memory": False}, headers=theirs
        )
        assert paused.status_code == 404
        # Still there for its own team, untouched.
        mine = httpx.get(f"{url}/snapshots", headers=_headers(runtime_server)).json()
        assert snapshot_id in [item["snapshotID"] for item in mine]
        assert _state(runtime_server, source) == "running"
    finally:
        httpx.delete(f"{url}/templates/{snapshot_id}", headers=_headers(runtime_server))


def test_SNAP_04_only_a_request_with_the_token_wakes_a_sandbox(
    runtime_server: RunningServer,
) -> None:
    url = runtime_server.url
    created = create(
        url,
        runtime_server.api_key,
        timeout=300,
        autoPause=True,
        autoResume={"enabled": True},
    )
    sandbox_id, token = created["sandboxID"], created["envdAccessToken"]
    try:
        assert run(url, sandbox_id, token, "true").exit_code == 0
        shortened = httpx.post(
            f"{url}/sandboxes/{sandbox_id}/timeout",
            json={"timeout": 1},
            headers=_headers(runtime_server),
        )
        assert shortened.status_code == 204
        wait_for(lambda: _state(runtime_server, sandbox_id) == "paused", SETTLE_S, "auto-pause")
        attempts: list[dict[str, str]] = [
            envd_headers(sandbox_id, None),  # envd /health: no token
            envd_headers(sandbox_id, "not-the-token"),
            {"E2b-Sandbox-Id": sandbox_id, "E2b-Sandbox-Port": "8000"},  # a private port
            {
                "E2b-Sandbox-Id": sandbox_id,
                "E2b-Sandbox-Port": "8000",
                "E2B-Traffic-Access-Token": "not-the-token",
            },
        ]
        for headers in attempts:
            refused = httpx.get(f"{url}/health", headers=headers)
            assert refused.status_code == 502, (headers, refused.text)
            assert _state(runtime_server, sandbox_id) == "paused", headers
        woken = run(url, sandbox_id, token, "echo awake")
        assert woken.stdout == "awake\n", woken
        assert _state(runtime_server, sandbox_id) == "running"
    finally:
        httpx.delete(f"{url}/sandboxes/{sandbox_id}", headers=_headers(runtime_server))


def test_SNAP_05_saved_disks_are_bounded_per_team_and_given_back(
    runtime: str, runtime_server_factory: Callable[..., RunningServer]
) -> None:
    server = runtime_server_factory(extra_env={"SANDGATE_LIMITS__MAX_SNAPSHOT_MIB_PER_TEAM": "3"})
    view = RuntimeView(runtime, server)
    url = server.url
    created = create(url, server.api_key, timeout=300)
    sandbox_id, token = created["sandboxID"], created["envdAccessToken"]
    wrote = run(url, sandbox_id, token, "head -c 2000000 /dev/urandom > /home/user/blob")
    assert wrote.exit_code == 0, wrote
    first = _snapshot(server, sandbox_id)
    assert first.status_code == 201, first.text

    second = _snapshot(server, sandbox_id)
    assert second.status_code == 429, second.text
    assert "limits.max_snapshot_mib_per_team" in second.json()["message"]
    to_disk = httpx.post(
        f"{url}/sandboxes/{sandbox_id}/pause", json={"memory": False}, headers=_headers(server)
    )
    assert to_disk.status_code == 429, to_disk.text
    # A refused save loses nothing: the sandbox runs on, with its files; nothing half-written.
    assert _state(server, sandbox_id) == "running" and view.exists(sandbox_id)
    assert run(url, sandbox_id, token, "wc -c < /home/user/blob").stdout == "2000000\n"
    saves = server.home / "snapshots"
    assert [p.name for p in saves.iterdir()] == [first.json()["snapshotID"].split(":")[0]]

    deleted = httpx.delete(
        f"{url}/templates/{first.json()['snapshotID']}", headers=_headers(server)
    )
    assert deleted.status_code == 204
    assert list(saves.iterdir()) == []  # given back
    paused = httpx.post(
        f"{url}/sandboxes/{sandbox_id}/pause", json={"memory": False}, headers=_headers(server)
    )
    assert paused.status_code == 204, paused.text
    assert not view.exists(sandbox_id)
    assert len(list(saves.iterdir())) == 1
    # The quota now holds the paused sandbox's disk: a snapshot of it is refused too.
    assert _snapshot(server, sandbox_id).status_code == 429
    killed = httpx.delete(f"{url}/sandboxes/{sandbox_id}", headers=_headers(server))
    assert killed.status_code == 204
    assert list(saves.iterdir()) == []
    assert not (server.home / "sandbox-envs" / f"{sandbox_id}.json").exists()
