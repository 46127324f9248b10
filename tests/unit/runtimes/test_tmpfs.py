"""``runtime.tmpfs``: a directory of sandboxes' runtime files gets a tmpfs of its own when it
is unused, and is left alone when anything of a running gateway's sandboxes is in it."""

from __future__ import annotations

import os
import socket
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest

from sandgate.runtimes._tmpfs import ensure_tmpfs, tmpfs_at, unmount


@pytest.fixture
def base(tmp_path: Path) -> Iterator[Path]:
    yield tmp_path
    for path in sorted(tmp_path.rglob("*"), key=lambda p: -len(p.parts)):
        if path.is_dir() and not path.is_symlink():
            unmount(path)


def test_an_unused_directory_gets_a_tmpfs_with_its_mode(base: Path) -> None:
    fresh, emptied = base / "fresh" / "sandboxes", base / "emptied"
    (emptied / "stage" / "gone").mkdir(parents=True)  # empty directories hide nothing
    assert ensure_tmpfs(fresh, 0o755) == "mounted"
    assert ensure_tmpfs(emptied, 0o711) == "mounted"
    assert tmpfs_at(fresh) and tmpfs_at(emptied)
    assert stat.S_IMODE(fresh.stat().st_mode) == 0o755
    assert stat.S_IMODE(emptied.stat().st_mode) == 0o711
    assert list(emptied.iterdir()) == []
    # A second start finds it there.
    assert ensure_tmpfs(fresh, 0o755) == "tmpfs already"
    # nosuid, nodev: nothing a sandbox's host directory holds is ever a device or setuid.
    options = next(
        line.split()[5]
        for line in Path("/proc/self/mountinfo").read_text().splitlines()
        if line.split()[4] == str(fresh)
    )
    assert {"nosuid", "nodev"} <= set(options.split(","))


def test_a_directory_in_use_is_left_where_it_is(base: Path) -> None:
    """A gateway upgraded while its sandboxes run: their files (and sockets) must stay
    reachable where they are, so nothing is mounted over them."""
    with_file = base / "sandboxes"
    (with_file / "abc").mkdir(parents=True)
    (with_file / "abc" / "guest.json").write_text("{}")
    with_socket = base / "bwrap"
    (with_socket / "abc").mkdir(parents=True)
    listener = socket.socket(socket.AF_UNIX)
    try:
        listener.bind(str(with_socket / "abc" / "guest.sock"))
        for path in (with_file, with_socket):
            assert ensure_tmpfs(path, 0o755).startswith("in use")
            assert not tmpfs_at(path)
    finally:
        listener.close()
    assert (with_file / "abc" / "guest.json").read_text() == "{}"


def test_a_directory_holding_a_mount_point_is_left_where_it_is(base: Path) -> None:
    """The host-wide directory holds the stages' mounts of running sandboxes."""
    runtime = base / "rt"
    assert ensure_tmpfs(runtime / "stage" / "abc" / "disk", 0o700) == "mounted"
    assert ensure_tmpfs(runtime, 0o711).startswith("in use")
    assert not tmpfs_at(runtime)


def test_unmount_takes_the_tmpfs_and_its_files_away(base: Path) -> None:
    path = base / "sandboxes"
    assert ensure_tmpfs(path, 0o755) == "mounted"
    (path / "x").write_text("gone with it")
    unmount(path)
    assert not tmpfs_at(path) and list(path.iterdir()) == []
    unmount(path)  # nothing there: nothing done
    assert os.path.isdir(path)
