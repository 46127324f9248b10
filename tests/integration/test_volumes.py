"""Team volumes (issue 13): named per-team ext4 volumes with a quota, mounted into sandboxes at
create (``volumeMounts``) ``nosuid,nodev`` with the sandboxes' own ids, shared by sandboxes of
the team at once, surviving sandbox kills and gateway restarts; a mounted volume cannot be
deleted. Raw HTTP on both runtimes (the SDKs' view is tests/compat/test_volumes.py).
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import pytest

from sandgate.volumes._image import MOUNT_DIR
from tests.fixtures.server import RunningServer
from tests.framework.envd import create, run

VOLUME_MIB = 64


@pytest.fixture(scope="module")
def volume_server(runtime_server_factory: Callable[..., RunningServer]) -> RunningServer:
    return runtime_server_factory(config={"limits": {"volume_mib": VOLUME_MIB}})


def _api(server: RunningServer, key: str | None = None) -> httpx.Client:
    return httpx.Client(
        base_url=server.url, headers={"X-API-Key": key or server.api_key}, timeout=120
    )


class VolumeHandle:
    def __init__(self, server: RunningServer, body: dict[str, Any]) -> None:
        self.server = server
        self.id: str = body["volumeID"]
        self.name: str = body["name"]
        self.token: str = body["token"]

    def content(self, method: str, kind: str, **kwargs: Any) -> httpx.Response:
        headers = {"Authorization": f"Bearer {self.token}", **kwargs.pop("headers", {})}
        return httpx.request(
            method,
            f"{self.server.url}/volumecontent/{self.id}/{kind}",
            headers=headers,
            timeout=120,
            **kwargs,
        )


@pytest.fixture
def volume(volume_server: RunningServer, request: pytest.FixtureRequest) -> Iterator[VolumeHandle]:
    name = (
        "vol-" + request.node.name.split("[")[0][-30:].replace("_", "-") + "-" + os.urandom(3).hex()
    )
    with _api(volume_server) as api:
        created = api.post("/volumes", json={"name": name})
        assert created.status_code == 201, created.text
        handle = VolumeHandle(volume_server, created.json())
        yield handle
        api.delete(f"/volumes/{handle.id}")


def _sandbox(
    server: RunningServer, volume: VolumeHandle, path: str = "/mnt/data"
) -> dict[str, Any]:
    return create(
        server.url,
        server.api_key,
        timeout=300,
        volumeMounts=[{"name": volume.name, "path": path}],
    )


def _sh(server: RunningServer, box: dict[str, Any], command: str, user: str | None = None) -> Any:
    return run(server.url, box["sandboxID"], box["envdAccessToken"], command, user=user)


def _kill(server: RunningServer, box: dict[str, Any]) -> None:
    with _api(server) as api:
        api.delete(f"/sandboxes/{box['sandboxID']}")


def test_volume_is_shared_persistent_and_refuses_deletion_while_mounted(
    volume_server: RunningServer, volume: VolumeHandle
) -> None:
    first = _sandbox(volume_server, volume)
    second = _sandbox(volume_server, volume, "/home/user/shared")
    try:
        mounts = _sh(volume_server, first, "grep ' /mnt/data ' /proc/self/mountinfo")
        assert mounts.exit_code == 0, mounts.stderr
        options = mounts.stdout.split()[5].split(",")
        assert {"nosuid", "nodev"} <= set(options), mounts.stdout
        wrote = _sh(
            volume_server,
            first,
            "echo from-first > /mnt/data/note.txt && stat -c '%u:%g %U' /mnt/data/note.txt "
            "&& stat -c '%u:%g' /mnt/data",
        )
        assert wrote.exit_code == 0, wrote.stderr
        assert wrote.stdout.split("\n")[:2] == ["1000:1000 user", "1000:1000"]
        # The other sandbox (another uid range on the host) sees it at once, as its own user.
        seen = _sh(volume_server, second, "cat /home/user/shared/note.txt; id -u; "
                   "stat -c '%U' /home/user/shared/note.txt")  # fmt: skip
        assert seen.stdout.split() == ["from-first", "1000", "user"], seen.stdout + seen.stderr
        # A setuid bit set inside has no effect (nosuid): the program runs as the caller.
        suid = _sh(
            volume_server,
            first,
            "sudo cp /usr/bin/id /mnt/data/myid && sudo chmod 4755 /mnt/data/myid && "
            "/mnt/data/myid -u",
        )
        assert suid.stdout.strip() == "1000", suid.stdout + suid.stderr
        with _api(volume_server) as api:
            refused = api.delete(f"/volumes/{volume.id}")
        assert refused.status_code == 409, refused.text
        assert first["sandboxID"] in refused.json()["message"]
        info = httpx.get(
            f"{volume_server.url}/sandboxes/{first['sandboxID']}",
            headers={"X-API-Key": volume_server.api_key},
        ).json()
        assert info["volumeMounts"] == [{"name": volume.name, "path": "/mnt/data"}]
    finally:
        _kill(volume_server, first)
        _kill(volume_server, second)
    # Killed sandboxes leave the data; a gateway restart too.
    volume_server.restart()
    read = volume.content("GET", "file", params={"path": "/note.txt"})
    assert (read.status_code, read.content) == (200, b"from-first\n")
    stat = volume.content("GET", "path", params={"path": "note.txt"}).json()
    assert (stat["uid"], stat["gid"], stat["type"], stat["size"]) == (1000, 1000, "file", 11)
    again = _sandbox(volume_server, volume, "/srv/v")
    try:
        assert _sh(volume_server, again, "cat /srv/v/note.txt").stdout == "from-first\n"
    finally:
        _kill(volume_server, again)
    with _api(volume_server) as api:
        deleted = api.delete(f"/volumes/{volume.id}")
        assert deleted.status_code == 204, deleted.text
        assert api.get(f"/volumes/{volume.id}").status_code == 404
    image = volume_server.home / "volumes" / f"{volume.id}.ext4"
    assert not image.exists()
    audited = [
        json.loads(line)
        for line in (volume_server.home / "audit" / "audit.jsonl").read_text().splitlines()
    ]
    assert [r["event"] for r in audited if (r.get("detail") or {}).get("volume") == volume.id] == [
        "volume.created",
        "volume.deleted",
    ]
    assert not (MOUNT_DIR / volume.id).exists()
    gone = volume.content("GET", "file", params={"path": "/note.txt"})
    assert gone.status_code == 401, gone.text


def test_RES_05_volume_quota_bounds_sandbox_and_api_writes(
    volume_server: RunningServer, volume: VolumeHandle
) -> None:
    box = _sandbox(volume_server, volume)
    try:
        fill = _sh(volume_server, box, "dd if=/dev/zero of=/mnt/data/big bs=1M count=200 2>&1")
        assert fill.exit_code != 0
        assert "No space left on device" in fill.stdout, fill.stdout
        size = int(_sh(volume_server, box, "stat -c %s /mnt/data/big").stdout)
        assert VOLUME_MIB * 1024 * 1024 * 0.8 < size <= VOLUME_MIB * 1024 * 1024
        # The file API meets the same wall: 507, and nothing half-written is left.
        full = volume.content(
            "PUT", "file", params={"path": "/more.bin"}, content=b"\0" * (8 * 1024 * 1024)
        )
        assert full.status_code == 507, full.text
        assert full.json()["code"] == 507
        listing = volume.content("GET", "dir", params={"path": "/"}).json()
        assert [entry["name"] for entry in listing] == ["big"]
    finally:
        _kill(volume_server, box)
    # The host disk the volume holds is bounded by its size, however hard it was filled.
    image = volume_server.home / "volumes" / f"{volume.id}.ext4"
    assert image.stat().st_blocks * 512 <= VOLUME_MIB << 20
    assert image.stat().st_size == VOLUME_MIB << 20


def test_MT_07_volumes_are_team_scoped_and_tokens_are_per_volume(
    volume_server: RunningServer, volume: VolumeHandle
) -> None:
    other = json.loads(
        volume_server.cli("keys", "create", "--team", "vol-other", "--name", "o", "--json").stdout
    )["key"]
    with _api(volume_server, other) as api:
        assert api.get(f"/volumes/{volume.id}").status_code == 404
        assert volume.id not in {v["volumeID"] for v in api.get("/volumes").json()}
        assert api.delete(f"/volumes/{volume.id}").status_code == 404
        mounted = api.post(
            "/v2/sandboxes",
            json={"templateID": "base", "volumeMounts": [{"name": volume.name, "path": "/x"}]},
        )
        assert mounted.status_code == 404, mounted.text
        assert "not found" in mounted.json()["message"]
        # Its own volume of the same name is another volume with another token.
        own = api.post("/volumes", json={"name": volume.name}).json()
        try:
            assert own["volumeID"] != volume.id and own["token"] != volume.token
            crossed = httpx.get(
                f"{volume_server.url}/volumecontent/{volume.id}/dir",
                params={"path": "/"},
                headers={"Authorization": f"Bearer {own['token']}"},
            )
            assert crossed.status_code == 401, crossed.text
        finally:
            api.delete(f"/volumes/{own['volumeID']}")
    for headers in ({}, {"Authorization": "Bearer nope"}, {"Authorization": volume.token}):
        answer = httpx.get(
            f"{volume_server.url}/volumecontent/{volume.id}/dir",
            params={"path": "/"},
            headers=headers,
        )
        assert answer.status_code == 401, answer.text
    unknown = httpx.get(
        f"{volume_server.url}/volumecontent/{'a' * 25}/dir",
        params={"path": "/"},
        headers={"Authorization": f"Bearer {volume.token}"},
    )
    assert (unknown.status_code, unknown.json()["message"]) == (
        401,
        httpx.get(
            f"{volume_server.url}/volumecontent/{volume.id}/dir",
            params={"path": "/"},
            headers={"Authorization": "Bearer nope"},
        ).json()["message"],
    )


@pytest.mark.parametrize(
    "path", ["/proc", "/proc/x", "/sys", "/dev/shm", "/run/sandgate", "/", "relative", "/a/../b"]
)
def test_VAL_08_mount_paths_are_checked(
    volume_server: RunningServer, volume: VolumeHandle, path: str
) -> None:
    with _api(volume_server) as api:
        answer = api.post(
            "/v2/sandboxes",
            json={"templateID": "base", "volumeMounts": [{"name": volume.name, "path": path}]},
        )
    assert answer.status_code == 400, answer.text
    assert answer.json()["error_code"] == "invalid_path"


def test_volume_names_and_quota_of_volumes(volume_server: RunningServer) -> None:
    with _api(volume_server) as api:
        for bad in ("", "has space", "a/b", "x" * 129, "dot.name"):
            answer = api.post("/volumes", json={"name": bad})
            assert answer.status_code == 400, (bad, answer.text)
        made = api.post("/volumes", json={"name": "dup-check"})
        assert made.status_code == 201
        try:
            again = api.post("/volumes", json={"name": "dup-check"})
            assert again.status_code == 409, again.text
        finally:
            api.delete(f"/volumes/{made.json()['volumeID']}")
