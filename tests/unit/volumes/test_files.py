"""The volume file API's host-side operations (``volumes.files``) on a plain directory: the
confinement rules hold on any file system (openat2 ``RESOLVE_IN_ROOT``); the real volumes
(ext4 images mounted into sandboxes) are attacked in tests/security/test_volume_files.py."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from sandgate.errors import Conflict, InvalidPath, InvalidRequest, NotFound, PayloadTooLarge
from sandgate.volumes import VolumeFiles, check_mount_path, check_volume_path


@pytest.fixture
def outside(tmp_path: Path) -> Path:
    path = tmp_path / "outside"
    path.mkdir()
    (path / "secret.txt").write_text("HOST")
    return path


@pytest.fixture
def files(tmp_path: Path) -> VolumeFiles:
    root = tmp_path / "volume"
    root.mkdir()
    return VolumeFiles(root, 1 << 20)


def _read(files: VolumeFiles, path: str) -> bytes:
    fd, size = files.open_for_reading(path)
    try:
        return os.read(fd, size + 1)
    finally:
        os.close(fd)


@pytest.mark.parametrize("path", ["..", "a/../b", "/a/..", "a\0b", "a\nb", "x" * 256])
def test_paths_are_checked(path: str) -> None:
    with pytest.raises(InvalidPath):
        check_volume_path(path)


def test_paths_name_the_volumes_own_tree() -> None:
    assert check_volume_path("/a//./b/") == ["a", "b"]
    assert check_volume_path("a/b") == ["a", "b"]
    assert check_volume_path("/") == []


def test_links_resolve_inside_the_volume(files: VolumeFiles, outside: Path) -> None:
    (files.root / "etc").mkdir()
    (files.root / "etc" / "passwd").write_text("volume's own")
    os.symlink("/etc/passwd", files.root / "abs")
    os.symlink(str(outside), files.root / "out")
    os.symlink("../../../../../etc/passwd", files.root / "dots")
    assert _read(files, "/abs") == b"volume's own"
    assert _read(files, "/dots") == b"volume's own"
    with pytest.raises(NotFound):
        _read(files, "/out/secret.txt")
    assert files.stat("/out").type == "symlink"


def test_writes_replace_links_and_hardlinks_instead_of_writing_through(
    files: VolumeFiles, outside: Path
) -> None:
    os.symlink(str(outside / "secret.txt"), files.root / "link")
    (files.root / "a").write_text("original")
    os.link(files.root / "a", files.root / "b")
    files.write("/link", [b"new"], uid=None, gid=None, mode=None, parents=False)
    files.write("/b", [b"new"], uid=None, gid=None, mode=None, parents=False)
    assert (outside / "secret.txt").read_text() == "HOST"
    assert (files.root / "a").read_text() == "original"
    assert not (files.root / "link").is_symlink()


def test_a_failed_upload_leaves_nothing(files: VolumeFiles) -> None:
    def chunks() -> object:
        yield b"part"
        raise RuntimeError("client went away")

    with pytest.raises(RuntimeError):
        files.write("/f", chunks(), uid=None, gid=None, mode=None, parents=False)  # type: ignore[arg-type]
    assert os.listdir(files.root) == []


def test_directories_parents_and_owners(files: VolumeFiles) -> None:
    with pytest.raises(NotFound):
        files.make_dir("/a/b", uid=None, gid=None, mode=None, parents=False)
    made, created = files.make_dir("/a/b", uid=5, gid=6, mode=0o700, parents=True)
    assert created and (made.type, made.uid, made.gid, made.mode) == ("directory", 5, 6, 0o700)
    with pytest.raises(Conflict):
        files.make_dir("/a/b", uid=None, gid=None, mode=None, parents=False)
    assert files.make_dir("/a/b", uid=None, gid=None, mode=None, parents=True)[1] is False
    # New entries belong to their directory's owner unless the caller says otherwise.
    written = files.write("/a/b/f", [b"x"], uid=None, gid=None, mode=None, parents=False)
    assert (written.uid, written.gid, written.mode) == (5, 6, 0o644)
    for bad in ({"uid": 65536}, {"gid": -1}, {"mode": 0o10000}):
        with pytest.raises(InvalidRequest):
            files.make_dir("/c", **{"uid": None, "gid": None, "mode": None, **bad}, parents=False)  # type: ignore[arg-type]
    with pytest.raises(Conflict):
        files.write("/a", [b"x"], uid=None, gid=None, mode=None, parents=False)


def test_metadata_changes_act_on_the_entry_itself(files: VolumeFiles, outside: Path) -> None:
    os.symlink(str(outside / "secret.txt"), files.root / "link")
    before = (outside / "secret.txt").stat()
    entry = files.update("/link", uid=7, gid=8, mode=None)
    assert (entry.type, entry.uid, entry.gid) == ("symlink", 7, 8)
    with pytest.raises(InvalidRequest, match="no mode"):
        files.update("/link", uid=None, gid=None, mode=0o777)
    after = (outside / "secret.txt").stat()
    assert (after.st_uid, after.st_mode) == (before.st_uid, before.st_mode)


def test_special_and_oversized_files_are_refused(files: VolumeFiles) -> None:
    os.mkfifo(files.root / "fifo")
    with pytest.raises(InvalidRequest, match="regular file"):
        files.open_for_reading("/fifo")
    with open(files.root / "sparse", "wb") as handle:
        handle.truncate(2 << 20)
    with pytest.raises(PayloadTooLarge):
        files.open_for_reading("/sparse")


def test_deep_and_wide_trees_are_listed_with_caps_and_removed_iteratively(
    files: VolumeFiles, outside: Path
) -> None:
    here = files.root / "deep"
    here.mkdir()
    os.chdir(here)
    try:
        for _ in range(1100):  # deeper than Python's recursion limit
            os.mkdir("d")
            os.chdir("d")
        os.symlink(str(outside), "escape")
    finally:
        os.chdir(files.root)
    assert len(files.list_dir("/deep", 32)) == 32
    with pytest.raises(InvalidRequest):
        files.list_dir("/deep", 33)
    wide = files.root / "wide"
    wide.mkdir()
    for index in range(10_001):
        (wide / f"f{index}").touch()
    with pytest.raises(InvalidRequest, match="10000"):
        files.list_dir("/wide", 1)
    files.remove("/deep")
    files.remove("/wide")
    assert os.listdir(files.root) == []
    assert (outside / "secret.txt").read_text() == "HOST"
    with pytest.raises(InvalidPath):
        files.remove("/")


@pytest.mark.parametrize("path", ["/proc", "/proc/1", "/sys", "/dev", "/dev/shm", "/run/sandgate",
                                  "/run/sandgate/x", "/", "x", "/a/../b", "/a\nb"])  # fmt: skip
def test_mount_paths_exclude_the_kernels_and_sandgates_own(path: str) -> None:
    with pytest.raises(InvalidPath):
        check_mount_path(path, "volumeMounts[0]")


def test_mount_paths_are_canonical() -> None:
    assert check_mount_path("/mnt//data/./", "m") == "/mnt/data"
    assert check_mount_path("/run/sandgate-data", "m") == "/run/sandgate-data"
