"""The volume file API against a volume a live sandbox mounts (security.md B2, §2.4 FILE-*,
VAL-01/02), on every runtime.

Unlike envd's file API (which acts *inside* the sandbox as its user), the volume file API is
the gateway acting as root on the volume's host mount, over data the sandbox controls and may
change *while* the API uses it. Each test plants its attack from inside the sandbox, attacks
over HTTP with the volume's token, and asserts what the attacker sees plus the host invariant:
a canary directory on the host keeps its files byte for byte and gains none.
"""

from __future__ import annotations

import base64
import hashlib
import secrets
import shutil
import stat
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.fixtures.server import RunningServer
from tests.framework.envd import create, run

MOUNT = "/mnt/v"
#: A special file must be refused at once, never block a worker.
PROMPT_S = 5.0
RACE_ROUNDS = 300


@pytest.fixture(scope="module")
def canary() -> Iterator[Path]:
    root = Path("/tmp") / f"sg-vol-canary-{secrets.token_hex(6)}"
    root.mkdir()
    (root / "secret.txt").write_bytes(b"HOST-CANARY-" + secrets.token_hex(16).encode())
    root.chmod(0o755)
    yield root
    shutil.rmtree(root, ignore_errors=True)


def _digest(root: Path) -> dict[str, tuple[str, int]]:
    return {
        p.name: (hashlib.sha256(p.read_bytes()).hexdigest(), stat.S_IMODE(p.stat().st_mode))
        for p in sorted(root.iterdir())
    }


class Target:
    """A volume, its token, and a sandbox that mounts it at ``MOUNT``."""

    def __init__(self, server: RunningServer, volume: dict[str, Any], sandbox: dict[str, Any]):
        self.server = server
        self.volume = volume
        self.sandbox = sandbox
        self.http = httpx.Client(
            base_url=f"{server.url}/volumecontent/{volume['volumeID']}",
            headers={"Authorization": f"Bearer {volume['token']}"},
            timeout=60,
        )

    def sh(self, command: str, user: str | None = None) -> str:
        result = run(
            self.server.url,
            self.sandbox["sandboxID"],
            self.sandbox["envdAccessToken"],
            command,
            user=user,
        )
        assert result.exit_code == 0, (command, result.stdout, result.stderr)
        return result.stdout

    def get(self, kind: str, path: str, **params: Any) -> httpx.Response:
        return self.http.get(f"/{kind}", params={"path": path, **params})


@pytest.fixture(scope="module")
def target(runtime_server_factory: Callable[..., RunningServer]) -> Iterator[Target]:
    server = runtime_server_factory(config={"limits": {"volume_mib": 64}})
    api = httpx.Client(base_url=server.url, headers={"X-API-Key": server.api_key}, timeout=60)
    volume = api.post("/volumes", json={"name": "attacked"}).json()
    sandbox = create(
        server.url,
        server.api_key,
        timeout=600,
        volumeMounts=[{"name": "attacked", "path": MOUNT}],
    )
    yield Target(server, volume, sandbox)
    api.delete(f"/sandboxes/{sandbox['sandboxID']}")
    api.delete(f"/volumes/{volume['volumeID']}")


def _error(response: httpx.Response, status: int) -> dict[str, Any]:
    assert response.status_code == status, (response.status_code, response.text)
    body: dict[str, Any] = response.json()
    assert body["code"] == status and isinstance(body["message"], str), body
    return body


def test_FILE_01_VAL_01_02_traversal_nul_and_encodings_are_refused(target: Target) -> None:
    target.sh(f"echo own > {MOUNT}/passwd")
    for path in ("../../etc/passwd", "/a/../../etc/passwd", "..", "x/.."):
        assert _error(target.get("file", path), 400)["error_code"] == "invalid_path", path
    assert _error(target.get("file", "a\x00b"), 400)["error_code"] == "invalid_path"
    raw = httpx.get(
        f"{target.server.url}/volumecontent/{target.volume['volumeID']}/file"
        "?path=..%2f..%2fetc%2fpasswd",
        headers=target.http.headers,
    )
    assert _error(raw, 400)["error_code"] == "invalid_path"
    # An absolute path names the volume's own file, never the host's.
    assert target.get("file", "/etc/passwd").status_code == 404
    assert target.get("file", "/passwd").content == b"own\n"


def test_FILE_02_links_to_host_paths_resolve_inside_the_volume(
    target: Target, canary: Path
) -> None:
    target.sh(
        f"mkdir -p {MOUNT}/f02 && ln -sfn {canary}/secret.txt {MOUNT}/f02/x && "
        f"ln -sfn /etc/shadow {MOUNT}/f02/y && ln -sfn / {MOUNT}/f02/root && "
        f"ln -sfn /proc/self/root/etc/passwd {MOUNT}/f02/magic"
    )
    secret = (canary / "secret.txt").read_bytes()
    for path in ("/f02/x", "/f02/y", f"/f02/root{canary}/secret.txt", "/f02/magic"):
        answer = target.get("file", path)
        assert answer.status_code in (400, 404), (path, answer.status_code, answer.text)
        assert secret not in answer.content and b"root:" not in answer.content
    link = target.get("path", "/f02/x").json()
    assert (link["type"], link["target"]) == ("symlink", f"{canary}/secret.txt")
    listed = target.get("dir", "/f02/root", depth=2)  # lists the volume's own root
    assert listed.status_code == 200
    assert "passwd" in {entry["name"] for entry in listed.json()}


def test_FILE_04_write_chown_and_chmod_through_planted_links_stay_inside(
    target: Target, canary: Path
) -> None:
    before = _digest(canary)
    target.sh(
        f"mkdir -p {MOUNT}/f04 && ln -sfn {canary}/secret.txt {MOUNT}/f04/out.txt && "
        f"ln -sfn {canary} {MOUNT}/f04/dir"
    )
    written = target.http.put("/file", params={"path": "/f04/out.txt"}, content=b"mine")
    assert written.status_code == 201, written.text
    assert written.json()["type"] == "file"  # the link was replaced, not followed
    assert target.sh(f"cat {MOUNT}/f04/out.txt") == "mine"
    # A link as a directory: resolved inside the volume, where that path does not exist.
    through = target.http.put("/file", params={"path": "/f04/dir/new.txt"}, content=b"x")
    assert through.status_code == 404, through.text
    # As with mkdir -p, a dangling link on the way is not made into a directory.
    made = target.http.post("/dir", params={"path": "/f04/dir/made", "force": "true"})
    assert made.status_code == 404, made.text
    # Once the link's target exists inside the volume, it is used (and stays inside).
    target.sh(f"mkdir -p {MOUNT}{canary}")
    made = target.http.post("/dir", params={"path": "/f04/dir/made", "force": "true"})
    assert made.status_code == 201, made.text
    assert target.sh(f"ls {MOUNT}{canary}").split() == ["made"]
    # Metadata changes act on the link itself; a link has no mode to change.
    owned = target.http.patch("/path", params={"path": "/f04/dir"}, json={"uid": 0, "gid": 0})
    assert owned.status_code == 200 and owned.json()["type"] == "symlink", owned.text
    assert _error(
        target.http.patch("/path", params={"path": "/f04/dir"}, json={"mode": 0o777}), 400
    )
    assert _digest(canary) == before
    assert canary.stat().st_uid == 0 and (canary / "secret.txt").stat().st_uid == 0


def test_FILE_05_symlink_exchange_race_never_leaves_the_volume(
    target: Target, canary: Path
) -> None:
    before = _digest(canary)
    secret = (canary / "secret.txt").read_bytes()
    swapper = base64.b64encode(
        f"""
import ctypes, os, time
libc = ctypes.CDLL(None, use_errno=True)
os.makedirs("{MOUNT}/f05/real", exist_ok=True)
open("{MOUNT}/f05/real/file", "w").write("inside")
if not os.path.lexists("{MOUNT}/f05/d"):
    os.symlink("{canary}", "{MOUNT}/f05/link")
    os.rename("{MOUNT}/f05/real", "{MOUNT}/f05/d")
    os.makedirs("{MOUNT}/f05/real")
end = time.time() + 25
a, b = b"{MOUNT}/f05/d", b"{MOUNT}/f05/link"
number = {{"x86_64": 316, "aarch64": 276}}[os.uname().machine]
while time.time() < end and not os.path.exists("{MOUNT}/f05/stop"):
    assert libc.syscall(number, -100, a, -100, b, 2) == 0  # renameat2(RENAME_EXCHANGE)
""".encode()
    ).decode()
    target.sh(f"echo {swapper} | base64 -d > /tmp/swap.py && (python3 /tmp/swap.py &)")
    seen: list[bytes] = []
    inside: list[int] = []
    lock = threading.Lock()

    def attack(index: int) -> None:
        got = target.get("file", "/f05/d/file" if index % 2 else "/f05/d/secret.txt")
        put = target.http.put(
            "/file", params={"path": f"/f05/d/new-{index}.txt"}, content=b"attacker"
        )
        with lock:
            seen.extend([got.content, put.content])
            if index % 2:
                inside.append(got.status_code)

    try:
        with ThreadPoolExecutor(8) as pool:
            list(pool.map(attack, range(RACE_ROUNDS)))
    finally:
        target.sh(f"touch {MOUNT}/f05/stop")
    assert all(secret not in body for body in seen)
    # The race really ran: the same path was the real directory, then the link, then again.
    assert {200, 404} <= set(inside), inside
    assert _digest(canary) == before  # zero host reads were answered, zero host writes


def test_FILE_07_hardlinks_are_replaced_not_written_through(target: Target) -> None:
    target.sh(
        f"mkdir -p {MOUNT}/f07 && echo original > {MOUNT}/f07/a && ln {MOUNT}/f07/a {MOUNT}/f07/b"
    )
    assert target.http.put("/file", params={"path": "/f07/b"}, content=b"new").status_code == 201
    assert target.sh(f"cat {MOUNT}/f07/a {MOUNT}/f07/b") == "original\nnew"
    # Hard links never cross into the volume from elsewhere (another file system).
    crossed = run(
        target.server.url,
        target.sandbox["sandboxID"],
        target.sandbox["envdAccessToken"],
        f"ln /etc/hostname {MOUNT}/f07/h",
    )
    assert crossed.exit_code != 0 and "cross-device" in crossed.stderr.lower(), crossed.stderr


def test_FILE_08_fifo_and_devices_are_refused_promptly(target: Target) -> None:
    target.sh(f"mkdir -p {MOUNT}/f08 && mkfifo {MOUNT}/f08/p")
    started = time.monotonic()
    answer = target.get("file", "/f08/p")
    assert time.monotonic() - started < PROMPT_S
    assert "regular file" in _error(answer, 400)["message"]
    device = run(
        target.server.url,
        target.sandbox["sandboxID"],
        target.sandbox["envdAccessToken"],
        f"mknod {MOUNT}/f08/zero c 1 5",
        user="root",
    )
    assert device.exit_code != 0, device.stdout
    assert target.get("path", "/f08/p").json()["type"] == "unknown"


def test_FILE_10_deep_trees_are_capped_and_removed_without_following_links(
    target: Target, canary: Path
) -> None:
    before = _digest(canary)
    target.sh(
        f"cd {MOUNT} && mkdir -p f10 && cd f10 && "
        "python3 -c \"import os\nfor _ in range(1000): os.mkdir('d'); os.chdir('d')\" && "
        f"ln -sfn {canary} escape && ln -sfn {canary} d/d/escape"
    )
    assert _error(target.get("dir", "/f10", depth=100), 400)
    listed = target.get("dir", "/f10", depth=32).json()
    assert len(listed) == 32 + 2  # one directory per level, and the two links
    assert target.http.delete("/path", params={"path": "/f10"}).status_code == 204
    assert target.get("path", "/f10").status_code == 404
    assert _digest(canary) == before


def test_FILE_16_a_sparse_file_larger_than_the_volume_is_refused(target: Target) -> None:
    target.sh(f"truncate -s 10G {MOUNT}/sparse")
    _error(target.get("file", "/sparse"), 413)
    target.sh(f"rm {MOUNT}/sparse")


def test_owner_and_mode_checks(target: Target) -> None:
    for params in ({"uid": "65536"}, {"gid": "-1"}, {"mode": "99999"}, {"uid": "+1"}):
        answer = target.http.post("/dir", params={"path": "/own", **params})
        assert answer.status_code == 400, (params, answer.text)
    made = target.http.put(
        "/file", params={"path": "/own/f", "force": "true", "uid": "0", "mode": "448"}, content=b"x"
    )
    assert made.status_code == 201, made.text
    assert (made.json()["uid"], made.json()["gid"], made.json()["mode"]) == (0, 1000, 0o700)
    # Inside, it is the sandbox's root's file, unreadable to its user.
    denied = run(
        target.server.url,
        target.sandbox["sandboxID"],
        target.sandbox["envdAccessToken"],
        f"cat {MOUNT}/own/f",
    )
    assert denied.exit_code != 0 and "denied" in denied.stderr.lower()
