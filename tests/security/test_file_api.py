"""File-API path attacks (security.md §2.4 FILE-*) against real sandboxes, over raw HTTP.

Each test asserts what the attacker sees (status, stable error, bytes) and, where it applies, a
host invariant: a host canary file outside every sandbox is byte-identical afterwards and no
file appears beside it. Sandgate's rule (api/e2b/filesystem.py, guest/_files.py): every path
is resolved by the guest inside the sandbox as the selected user, so absolute paths and ``..``
name the sandbox's own files, never the host's.
"""

from __future__ import annotations

import hashlib
import secrets
import shutil
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.fixtures.server import RunningServer
from tests.framework.sandbox_http import SandboxHttp, open_sandbox, rss_bytes

pytestmark = pytest.mark.docker

#: A special file must be refused at once, never block a worker.
PROMPT_S = 5.0


@pytest.fixture(scope="module")
def canary() -> Iterator[Path]:
    """A host directory holding ``secret.txt`` with random bytes; removed afterwards."""
    root = Path("/tmp") / f"sg-canary-{secrets.token_hex(6)}"
    root.mkdir()
    (root / "secret.txt").write_bytes(b"HOST-CANARY-" + secrets.token_hex(16).encode())
    yield root
    shutil.rmtree(root, ignore_errors=True)


def _digest(root: Path) -> dict[str, str]:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(root.iterdir())}


def _error(response: httpx.Response, status: int) -> dict[str, object]:
    assert response.status_code == status, (response.status_code, response.text)
    assert response.headers["content-type"].startswith("application/json"), response.headers
    body = response.json()
    assert body["code"] == status and isinstance(body["message"], str), body
    return dict(body)


def test_FILE_01_traversal_names_the_sandboxs_own_files(sbx: SandboxHttp) -> None:
    sandbox_passwd = sbx.sh("cat /etc/passwd").encode()
    host_passwd = Path("/etc/passwd").read_bytes()
    for path in ("../../../../etc/passwd", "/home/user/../../etc/passwd", "/etc/passwd"):
        response = sbx.get_file(path)
        assert response.status_code == 200, (path, response.text)
        assert response.content == sandbox_passwd, path
    if host_passwd != sandbox_passwd:
        assert sbx.get_file("/etc/passwd").content != host_passwd
    # /proc/1/environ of the sandbox's init (the guest, not dumpable): refused even to root.
    assert sbx.get_file("/proc/1/environ").status_code in (400, 403)
    assert sbx.get_file("/proc/1/environ", user="root").status_code in (400, 403)


def test_FILE_02_symlink_to_host_path_and_etc_shadow(sbx: SandboxHttp, canary: Path) -> None:
    before = _digest(canary)
    secret = (canary / "secret.txt").read_bytes()
    sbx.sh(f"ln -sf {canary}/secret.txt /home/user/x && ln -sf /etc/shadow /home/user/y")

    host_link = sbx.get_file("/home/user/x", user="root")
    _error(host_link, 404)  # resolved inside the sandbox, where that host path does not exist
    assert secret not in host_link.content

    denied = _error(sbx.get_file("/home/user/y"), 403)
    assert "ermission" in str(denied["message"]), denied
    as_root = sbx.get_file("/home/user/y", user="root")
    assert as_root.status_code == 200, as_root.text
    assert as_root.content == sbx.sh("cat /etc/shadow", user="root").encode()
    stat = sbx.rpc("filesystem.Filesystem/Stat", {"path": "/home/user/y"})
    assert stat.status_code == 200, stat.text
    assert stat.json()["entry"]["symlinkTarget"] == "/etc/shadow"
    assert _digest(canary) == before


def test_FILE_04_write_through_planted_link_stays_inside(sbx: SandboxHttp, canary: Path) -> None:
    before = _digest(canary)
    sbx.sh(f"ln -sf {canary}/secret.txt /home/user/out.txt")
    response = sbx.put_file("/home/user/out.txt", b"overwritten by the attacker", user="root")
    # The write follows the link *inside* the sandbox (creating the path there) or is refused.
    assert response.status_code in (200, 400, 403, 404), response.text
    assert _digest(canary) == before, "the host canary changed"
    assert sorted(p.name for p in canary.iterdir()) == ["secret.txt"]
    if response.status_code == 200:
        inside = sbx.sh(f"cat {canary}/secret.txt", user="root")
        assert inside == "overwritten by the attacker"


def test_FILE_08_special_files_refused_promptly_kernel_files_bounded(
    runtime_server: RunningServer,
) -> None:
    """FIFOs and devices are refused at once; files the kernel generates (``/proc``, ``/sys``)
    are read as the sandbox's user sees them, inside its namespaces, bounded: one that is not
    data or has no end is refused with a clear error, never streamed or waited on."""
    sbx = open_sandbox(runtime_server.url, runtime_server.api_key)
    try:
        sbx.sh("rm -f /home/user/p && mkfifo /home/user/p")
        for path, user, status, says in (
            ("/home/user/p", None, 400, "not a regular file"),
            ("/dev/zero", "root", 400, "not a regular file"),
            ("/dev/urandom", "root", 400, "not a regular file"),
            ("/proc/self/mem", "root", 400, "the kernel does not serve this file as data"),
            ("/proc/self/pagemap", "root", 400, "yields more than 16 MiB"),  # ~256 GiB
            ("/proc/kmsg", "root", 403, "Permission denied"),
        ):
            started = time.monotonic()
            response = sbx.get_file(path, user=user, timeout=PROMPT_S * 2)
            assert time.monotonic() - started < PROMPT_S, path
            body = _error(response, status)
            assert says in str(body["message"]), (path, body)
        # /proc/kcore is masked by the runtime: absent or refused, never kernel memory.
        kcore = sbx.get_file("/proc/kcore", user="root", timeout=PROMPT_S * 2)
        assert kcore.status_code in (400, 403, 404), kcore.status_code
        # Writing onto a FIFO is refused too, and does not block.
        started = time.monotonic()
        _error(sbx.put_file("/home/user/p", b"x", timeout=PROMPT_S * 2), 400)
        assert time.monotonic() - started < PROMPT_S

        # What E2B clients read (boot_id tells a reboot from a resume): exactly what `cat`
        # shows the same user in the sandbox, with its length; ranges apply to those bytes.
        for path in ("/proc/sys/kernel/random/boot_id", "/proc/sys/kernel/hostname"):
            response = sbx.get_file(path)
            assert response.status_code == 200, (path, response.text)
            assert response.content == sbx.sh(f"cat {path}").encode(), path
            assert response.headers["content-length"] == str(len(response.content))
        boot_id = sbx.get_file("/proc/sys/kernel/random/boot_id").content
        head = sbx.get_file("/proc/sys/kernel/random/boot_id", headers={"Range": "bytes=0-7"})
        assert (head.status_code, head.content) == (206, boot_id[:8])
        assert head.headers["content-range"] == f"bytes 0-7/{len(boot_id)}"
        # Still the sandbox's user, still inside its namespaces.
        status = sbx.get_file("/proc/self/status").text
        uid = next(line.split()[1] for line in status.splitlines() if line.startswith("Uid:"))
        assert uid == sbx.sh("id -u").strip() != "0"
        uid_map = sbx.get_file("/proc/self/uid_map").text
        assert uid_map == sbx.sh("cat /proc/self/uid_map")
        inside, outside = uid_map.split()[:2]
        assert inside == "0" and outside != "0", "sandbox root must map to a host uid of its own"
    finally:
        sbx.kill()


def test_FILE_10_deep_tree_list_and_remove(sbx: SandboxHttp, canary: Path) -> None:
    before = _digest(canary)
    sbx.sh(
        "cd /home/user && rm -rf deep && mkdir deep && cd deep && "
        "python3 -c \"import os; os.makedirs('/'.join(['d'] * 300))\" && "
        f"ln -s {canary} d/hostdir && ln -s /etc d/etcdir"
    )
    listing = sbx.rpc("filesystem.Filesystem/ListDir", {"path": "/home/user/deep", "depth": 1000})
    assert listing.status_code == 200, listing.text
    paths = [e["path"] for e in listing.json()["entries"]]
    assert len(paths) >= 300, len(paths)
    assert not any("/etcdir/" in p for p in paths), "listing followed a symlinked directory"
    removed = sbx.rpc("filesystem.Filesystem/Remove", {"path": "/home/user/deep"})
    assert removed.status_code == 200, removed.text
    assert sbx.sh("test -e /home/user/deep && echo left || echo gone") == "gone\n"
    assert sbx.sh("test -e /etc/passwd && echo kept") == "kept\n", "delete followed a link"
    assert _digest(canary) == before


def test_FILE_11_rename_stays_inside_and_moves_only_the_link(sbx: SandboxHttp) -> None:
    name = f"sg-ren-{secrets.token_hex(4)}"
    sbx.sh("echo moving > /home/user/ren-a")
    moved = sbx.rpc(
        "filesystem.Filesystem/Move",
        {"source": "/home/user/ren-a", "destination": f"../../../tmp/{name}"},
    )
    assert moved.status_code == 200, moved.text
    assert moved.json()["entry"]["path"] == f"/tmp/{name}"
    assert not Path(f"/tmp/{name}").exists(), "a rename reached the host's /tmp"
    assert sbx.sh(f"cat /tmp/{name}") == "moving\n"

    sbx.sh("echo target > /home/user/ren-target && ln -sf /home/user/ren-target /home/user/ln")
    moved = sbx.rpc(
        "filesystem.Filesystem/Move",
        {"source": "/home/user/ln", "destination": "/home/user/ln-moved"},
    )
    assert moved.status_code == 200, moved.text
    assert sbx.sh("readlink /home/user/ln-moved") == "/home/user/ren-target\n"
    assert sbx.sh("cat /home/user/ren-target") == "target\n"


def test_FILE_16_sparse_100g_is_streamed_with_ranges(
    sbx: SandboxHttp, sandgate_server: RunningServer
) -> None:
    assert sandgate_server.process is not None
    sbx.sh("truncate -s 100G /home/user/sparse")
    size = 100 * 1024**3
    tail = sbx.get_file("/home/user/sparse", headers={"Range": f"bytes={size - 100}-"})
    assert tail.status_code == 206, tail.status_code
    assert tail.headers["content-range"] == f"bytes {size - 100}-{size - 1}/{size}"
    assert tail.content == b"\0" * 100

    rss_before = rss_bytes(sandgate_server.process.pid)
    with sbx.http.stream(
        "GET",
        f"{sbx.url}/files",
        params={"path": "/home/user/sparse"},
        headers=sbx.headers,
        timeout=30,
    ) as response:
        assert response.status_code == 200
        assert response.headers["content-length"] == str(size)
        received = 0
        for chunk in response.iter_bytes():
            received += len(chunk)
            if received >= 64 * 1024 * 1024:
                break
    assert received >= 64 * 1024 * 1024
    growth = rss_bytes(sandgate_server.process.pid) - rss_before
    assert growth < 48 * 1024 * 1024, f"gateway RSS grew {growth >> 20} MiB streaming a file"


def test_FILE_17_other_sandboxes_are_not_reachable_by_path(
    sbx: SandboxHttp, neighbour: SandboxHttp
) -> None:
    neighbour.sh("echo neighbour-secret > /home/user/secret")
    for path in (
        "/proc/1/root/home/user/secret",
        f"/home/user/../../{neighbour.sandbox_id}/home/user/secret",
        f"/{neighbour.sandbox_id}/home/user/secret",
    ):
        response = sbx.get_file(path, user="root")
        # 403: /proc/1 is the guest's, which even the sandbox's root may not enter.
        assert response.status_code in (400, 403, 404), (path, response.status_code)
        assert b"neighbour-secret" not in response.content


def test_FILE_huge_upload_is_bounded_by_the_sandbox_disk(small_disk_sbx: SandboxHttp) -> None:
    """An upload larger than the sandbox's disk ends in 507 (SDK: NotEnoughSpaceException) and
    leaves no partial file behind."""
    sbx = small_disk_sbx
    chunk = b"\0" * (1024 * 1024)
    response = sbx.put_file("/tmp/huge.bin", iter([chunk] * 96))  # the disk is 64 MiB
    body = _error(response, 507)
    assert "space" in str(body["message"]), body
    assert sbx.sh("ls -A /tmp | grep -c huge || true") == "0\n", "a partial upload was left"
    assert sbx.put_file("/tmp/small.bin", b"fits").status_code == 200


def test_FILE_invalid_utf8_names_are_listed_with_valid_json(sbx: SandboxHttp) -> None:
    sbx.sh("mkdir -p /home/user/u8 && touch /home/user/u8/$'\\xff\\xfe.bin' /home/user/u8/ok")
    response = sbx.rpc("filesystem.Filesystem/ListDir", {"path": "/home/user/u8"})
    assert response.status_code == 200, response.text
    response.content.decode("utf-8")  # strict: the body must be valid UTF-8
    names = sorted(e["name"] for e in response.json()["entries"])
    assert names == ["ok", "\ufffd\ufffd.bin"], names
