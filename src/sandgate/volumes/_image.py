"""A volume's disk: a sparse ext4 image file, loop-mounted once per host.

Why ext4 in a file: a volume is host disk that sandboxes fill, so it needs a quota the kernel
enforces for every writer (sandboxes and the file API alike). A file system of the volume's
size is that quota, for bytes and inodes (RES-05/07): a full volume is ENOSPC inside, never
host disk pressure beyond its size. The image is sparse (disk is used as it fills) and made
once, at volume create, with its root owned by the sandboxes' default user (uid 1000, stored
as sandbox-relative ids; ``_stage`` shows them through each sandbox's idmap).

The host mount (``/run/sandgate-rt/volumes/<id>``, ``nosuid,nodev,noatime``, in a directory only
root can enter) is made on first use and kept while the gateway runs; each sandbox binds an
idmapped clone of it (``runtimes._stage``). SECURITY: one image must never be mounted twice as
two file systems (two ext4 superblocks over one file corrupt it). So a mount reuses the loop
device already attached to the image, if any (the same superblock again), and the host mount is
only removed when the volume is deleted (no sandbox holds a clone then).
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Final

from sandgate.errors import RuntimeUnavailable
from sandgate.runtimes._uids import RUNTIME_DIR

__all__ = [
    "MOUNT_DIR",
    "VOLUME_OWNER",
    "allocated_bytes",
    "ensure_mounted",
    "make_image",
    "unmount",
]

#: Where volumes are mounted on the host (one directory per volume id).
MOUNT_DIR: Final = RUNTIME_DIR / "volumes"
#: Owner (uid and gid, sandbox-relative) of a new volume's root: the sandboxes' ``user``.
VOLUME_OWNER: Final = 1000
_TOOL_TIMEOUT_S: Final = 120.0
_PATH: Final = {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin"}


def make_image(path: Path, size_mib: int) -> None:
    """Creates ``path``: a sparse ext4 image of ``size_mib`` MiB whose root is owned by
    ``VOLUME_OWNER``, with no ``lost+found``. Atomic (built under a temporary name, fsynced,
    renamed); raises ``RuntimeUnavailable`` naming the tool that failed."""
    temp = path.with_name(f".{path.name}.tmp")
    fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o600)
    try:
        os.ftruncate(fd, size_mib * 1024 * 1024)
        owner = f"{VOLUME_OWNER}:{VOLUME_OWNER}"
        _run(
            "mkfs.ext4",
            ["-F", "-q", "-b", "4096", "-m", "0", "-L", "sandgate-vol", "-E",
             f"root_owner={owner}", str(temp)],
        )  # fmt: skip
        # lost+found is for fsck on a host disk; in a volume it only confuses listings.
        _run("debugfs", ["-w", "-R", "rmdir lost+found", str(temp)])
        os.fsync(fd)
    except BaseException:
        os.close(fd)
        temp.unlink(missing_ok=True)
        raise
    os.close(fd)
    temp.rename(path)
    dir_fd = os.open(path.parent, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


def allocated_bytes(path: Path) -> int:
    """Host disk the image occupies now (it is sparse)."""
    try:
        return os.stat(path).st_blocks * 512
    except FileNotFoundError:
        return 0


def ensure_mounted(image: Path, mountpoint: Path) -> None:
    """Mounts ``image`` at ``mountpoint`` unless it is mounted there already; raises
    ``RuntimeUnavailable``. Serialised host-wide (a lock file under ``MOUNT_DIR``)."""
    with _host_lock():
        if os.path.ismount(mountpoint):
            return
        if not image.is_file():
            raise RuntimeUnavailable(
                f"the volume's disk image {image.name} is missing from the volumes directory; "
                "restore it from a backup or delete the volume"
            )
        mountpoint.mkdir(mode=0o700, exist_ok=True)
        # SECURITY: reuse the loop device that already holds this image (a sandbox kept a
        # clone of an earlier mount): a second device would make a second superblock.
        attached = _run("losetup", ["-j", str(image), "-n", "-O", "NAME"]).split()
        source, options = (attached[0], "") if attached else (str(image), "loop,")
        _run(
            "mount",
            ["-t", "ext4", "-o", f"{options}nosuid,nodev,noatime", source, str(mountpoint)],
        )


def unmount(mountpoint: Path) -> None:
    """Removes the host mount (lazily if something still holds it; the loop device goes with
    the last reference) and its directory; idempotent."""
    with _host_lock():
        if os.path.ismount(mountpoint):
            try:
                _run("umount", [str(mountpoint)])
            except RuntimeUnavailable:
                _run("umount", ["--lazy", str(mountpoint)])
        with contextlib.suppress(OSError):
            mountpoint.rmdir()


@contextlib.contextmanager
def _host_lock() -> Iterator[None]:
    MOUNT_DIR.mkdir(parents=True, exist_ok=True, mode=0o700)
    MOUNT_DIR.chmod(0o700)
    fd = os.open(MOUNT_DIR / ".lock", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def _run(tool: str, args: list[str]) -> str:
    path = shutil.which(tool, path=_PATH["PATH"])
    if path is None:
        raise RuntimeUnavailable(
            f"volumes need {tool} on the gateway's host: apt-get install e2fsprogs mount"
        )
    try:
        proc = subprocess.run(
            [path, *args],
            capture_output=True,
            text=True,
            timeout=_TOOL_TIMEOUT_S,
            env=_PATH,
            check=False,
        )
    except subprocess.TimeoutExpired:
        raise RuntimeUnavailable(f"{tool} did not finish within {_TOOL_TIMEOUT_S:.0f} s") from None
    if proc.returncode != 0:
        why = (proc.stderr or proc.stdout).strip()[:300]
        raise RuntimeUnavailable(f"{tool} failed: {why or f'exit status {proc.returncode}'}")
    return proc.stdout
