"""A sandbox's layer saved from one uid range restores exactly into another (real overlayfs on
real tmpfs), and a hostile archive cannot write outside the new upper (SNAP-01)."""

from __future__ import annotations

import ctypes
import io
import os
import stat
import struct
import tarfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from sandgate.errors import DiskFull, SnapshotDamaged
from sandgate.runtimes._layer import export_layer, import_layer

BASE_A = 1_000_000_000 + 7 * 65536
BASE_B = 1_000_000_000 + 9 * 65536
_libc = ctypes.CDLL(None, use_errno=True)


def _mount(source: str, target: Path, fstype: str, options: str) -> None:
    target.mkdir(parents=True, exist_ok=True)
    if _libc.mount(source.encode(), str(target).encode(), fstype.encode(), 0, options.encode()):
        raise OSError(ctypes.get_errno(), f"mount {fstype} at {target}")


def _umount(target: Path) -> None:
    _libc.umount2(str(target).encode(), 2)


@pytest.fixture
def disk(tmp_path: Path) -> Iterator[Path]:
    """A tmpfs, as a sandbox's disk is (the test's own /tmp may not take overlay uppers)."""
    path = tmp_path / "disk"
    _mount("tmpfs", path, "tmpfs", "size=64m,mode=0711")
    yield path
    _umount(path)


def _overlay(lower: Path, upper: Path, work: Path, merged: Path) -> None:
    upper.mkdir(exist_ok=True)
    work.mkdir(exist_ok=True)
    _mount("overlay", merged, "overlay", f"lowerdir={lower},upperdir={upper},workdir={work}")


def _acl(entries: list[tuple[int, int, int]]) -> bytes:
    return struct.pack("<I", 2) + b"".join(struct.pack("<HHI", *e) for e in entries)


def _template(root: Path) -> None:
    (root / "etc").mkdir(parents=True)
    (root / "etc" / "gone").write_text("lower")
    (root / "etc" / "kept").write_text("lower")
    (root / "replaced").mkdir()
    (root / "replaced" / "old").write_text("lower")


def _sandbox_writes(merged: Path, base: int) -> None:
    """What a sandbox does to its root: new, changed, deleted, replaced, linked, special."""
    (merged / "etc" / "gone").unlink()  # whiteout
    (merged / "etc" / "kept").write_text("changed")  # copy-up
    for child in (merged / "replaced").iterdir():
        child.unlink()
    (merged / "replaced").rmdir()
    (merged / "replaced").mkdir()  # opaque directory
    (merged / "replaced" / "new").write_text("upper")
    home = merged / "home" / "user"
    home.mkdir(parents=True)
    (home / "data.bin").write_bytes(bytes(range(256)) * 4096)
    os.link(home / "data.bin", home / "data.link")
    os.symlink("/etc/passwd", home / "to-passwd")
    os.mkfifo(home / "pipe", 0o640)
    os.setxattr(home / "data.bin", "user.note", b"\x00\xffbinary")
    os.setxattr(
        home / "data.bin",
        "system.posix_acl_access",
        _acl([(1, 6, 0xFFFFFFFF), (2, 4, base + 1001), (4, 4, 0xFFFFFFFF), (0x10, 4, 0xFFFFFFFF),
              (0x20, 0, 0xFFFFFFFF)]),
    )  # fmt: skip
    for path in (home.parent, home, home / "data.bin", home / "pipe"):
        os.chown(path, base + 1000, base + 1000, follow_symlinks=False)
    os.chown(home / "to-passwd", base + 1000, base + 1000, follow_symlinks=False)
    os.chmod(home / "data.bin", 0o4751)  # set-id bits kept as bits (nosuid makes them inert)
    os.utime(home / "data.bin", (1_700_000_000.5, 1_700_000_000.5))


def test_a_layer_restores_into_another_range_exactly(tmp_path: Path, disk: Path) -> None:
    lower = tmp_path / "lower"
    _template(lower)
    merged = tmp_path / "merged"
    _overlay(lower, disk / "a-upper", disk / "a-work", merged)
    try:
        _sandbox_writes(merged, BASE_A)
    finally:
        _umount(merged)
    upper_a = disk / "a-upper"
    assert stat.S_ISCHR((upper_a / "etc" / "gone").lstat().st_mode), "the kernel made a whiteout"
    assert os.getxattr(upper_a / "replaced", "trusted.overlay.opaque") == b"y"

    archive = tmp_path / "layer.tar"
    stats = export_layer(upper_a, BASE_A, archive)
    assert stats.size_bytes == archive.stat().st_size and stats.entries >= 10
    with tarfile.open(archive) as tar:  # owners are stored relative to the range
        owners = {m.name: (m.uid, m.gid) for m in tar.getmembers()}
    assert owners["home/user/data.bin"] == (1000, 1000)

    upper_b = disk / "b-upper"
    upper_b.mkdir()
    import_layer(archive, upper_b, BASE_B, disk_mib=64)
    assert os.getxattr(upper_b / "replaced", "trusted.overlay.opaque") == b"y"
    assert (upper_b / "etc" / "gone").lstat().st_rdev == 0

    _overlay(lower, upper_b, disk / "b-work", merged)
    try:
        home = merged / "home" / "user"
        assert not (merged / "etc" / "gone").exists()
        assert (merged / "etc" / "kept").read_text() == "changed"
        assert sorted(os.listdir(merged / "replaced")) == ["new"]
        data = (home / "data.bin").lstat()
        assert (data.st_uid, data.st_gid) == (BASE_B + 1000, BASE_B + 1000)
        assert stat.S_IMODE(data.st_mode) == 0o4751
        assert data.st_mtime == 1_700_000_000  # kept to the second
        assert (home / "data.bin").read_bytes() == bytes(range(256)) * 4096
        assert (home / "data.link").lstat().st_ino == data.st_ino, "hard link kept"
        assert os.readlink(home / "to-passwd") == "/etc/passwd"
        assert (home / "to-passwd").lstat().st_uid == BASE_B + 1000
        assert stat.S_ISFIFO((home / "pipe").lstat().st_mode)
        assert stat.S_IMODE((home / "pipe").lstat().st_mode) == 0o640
        assert os.getxattr(home / "data.bin", "user.note") == b"\x00\xffbinary"
        acl = os.getxattr(home / "data.bin", "system.posix_acl_access")
        named = [struct.unpack_from("<HHI", acl, o) for o in range(4, len(acl), 8)]
        assert (2, 4, BASE_B + 1001) in named, named
        assert (home.parent).lstat().st_uid == BASE_B + 1000
    finally:
        _umount(merged)


def _hostile(tmp_path: Path, *members: tuple[tarfile.TarInfo, bytes | None]) -> Path:
    archive = tmp_path / "hostile.tar"
    with tarfile.open(archive, "w", format=tarfile.PAX_FORMAT) as tar:
        root = tarfile.TarInfo(".")
        root.type = tarfile.DIRTYPE
        root.mode = 0o755
        tar.addfile(root)
        for info, data in members:
            if data is not None:
                info.size = len(data)
            tar.addfile(info, io.BytesIO(data) if data is not None else None)
    return archive


def _entry(name: str, kind: bytes, **fields: object) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type = kind
    info.mode = 0o644
    for key, value in fields.items():
        setattr(info, key, value)
    return info


@pytest.mark.parametrize(
    "members",
    [
        pytest.param([(_entry("../escape", tarfile.REGTYPE), b"x")], id="dot-dot"),
        pytest.param([(_entry("/abs", tarfile.REGTYPE), b"x")], id="absolute"),
        pytest.param(
            [
                (_entry("link", tarfile.SYMTYPE, linkname="{outside}"), None),
                (_entry("link/escape", tarfile.REGTYPE), b"x"),
            ],
            id="through-a-symlink",
        ),
        pytest.param(
            [(_entry("hard", tarfile.LNKTYPE, linkname="../outside/canary"), None)],
            id="hardlink-out",
        ),
        pytest.param(
            [(_entry("sda", tarfile.BLKTYPE, devmajor=8, devminor=0), None)], id="block-device"
        ),
        pytest.param(
            [(_entry("mem", tarfile.CHRTYPE, devmajor=1, devminor=1), None)], id="char-device"
        ),
        pytest.param([(_entry("root-owned", tarfile.REGTYPE, uid=70000), b"x")], id="uid-range"),
        pytest.param(
            [
                (
                    _entry(
                        "x",
                        tarfile.REGTYPE,
                        pax_headers={"SANDGATE.xattr.security.capability": "AA=="},
                    ),
                    b"x",
                )
            ],
            id="security-xattr",
        ),
    ],
)
def test_SNAP_01_a_hostile_archive_never_writes_outside_the_upper(
    tmp_path: Path, disk: Path, members: list[tuple[tarfile.TarInfo, bytes | None]]
) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "canary").write_text("host")
    for info, _ in members:
        if info.linkname == "{outside}":
            info.linkname = str(outside)
    archive = _hostile(tmp_path, *members)
    upper = disk / "upper"
    upper.mkdir()
    with pytest.raises(SnapshotDamaged):
        import_layer(archive, upper, BASE_B, disk_mib=64)
    assert sorted(os.listdir(outside)) == ["canary"]
    assert (outside / "canary").read_text() == "host"
    assert (outside / "canary").stat().st_nlink == 1
    assert not (tmp_path / "escape").exists() and not Path("/abs").exists()


def test_a_layer_larger_than_the_disk_is_disk_full(tmp_path: Path, disk: Path) -> None:
    big = _entry("big", tarfile.REGTYPE)
    archive = _hostile(tmp_path, (big, b"\0" * (3 * 1024 * 1024)))
    small = tmp_path / "small"
    _mount("tmpfs", small, "tmpfs", "size=1m")
    try:
        (small / "upper").mkdir()
        with pytest.raises(DiskFull, match=r"limits\.disk_mib"):
            import_layer(archive, small / "upper", BASE_B, disk_mib=1)
    finally:
        _umount(small)


def test_SNAP_01_a_truncated_archive_is_damaged(tmp_path: Path, disk: Path) -> None:
    archive = _hostile(tmp_path, (_entry("f", tarfile.REGTYPE), b"y" * 100_000))
    data = archive.read_bytes()
    archive.write_bytes(data[: len(data) // 2])
    (disk / "upper").mkdir()
    with pytest.raises(SnapshotDamaged):
        import_layer(archive, disk / "upper", BASE_B, disk_mib=64)
