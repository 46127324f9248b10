"""Sandboxes' host-side runtime files on a tmpfs of their own.

Every create writes a few dozen small files and directories on the host (the sandbox's host
directory: the guest's code and configuration, its sockets, the tool stubs; bubblewrap's state;
the stage's mount points) and every kill deletes them. On ext4 without a journal, common on
cloud VMs (this project's CI among them), the kernel finds each new inode by skipping every
inode deleted in the last half minute (``recently_deleted``), so a busy gateway's creates paid
more and more CPU for that file work: 5-15 ms each (docs/benchmarks.md, "Runtime files on a
tmpfs"). None of these files outlives what it serves: a host directory is rebuilt for every
start, and neither the files nor the sandboxes mean anything after a reboot. So ``serve`` keeps
them on a tmpfs, mounted where they always were.

A directory that already holds files (the sandboxes of a gateway that ran before the upgrade,
whose sockets must stay reachable) is left as it is; a later start that finds it empty mounts.
Nothing here raises: without root, or where the kernel refuses, the files stay where they are.
"""

from __future__ import annotations

import ctypes
import os
from pathlib import Path

from sandgate.runtimes._uids import RUNTIME_DIR

__all__ = ["ensure_tmpfs", "mount_runtime_dirs", "runtime_dirs", "tmpfs_at", "unmount"]

_libc = ctypes.CDLL(None, use_errno=True)
_MS_NOSUID = 2
_MS_NODEV = 4
_MNT_DETACH = 2


def runtime_dirs(home: Path) -> list[tuple[Path, int]]:
    """The directories of per-sandbox runtime files, with the mode each is made with: the
    host-wide one (stages, uid claims) and this home's (host directories, bubblewrap's state)."""
    return [(RUNTIME_DIR, 0o711), (home / "sandboxes", 0o755), (home / "bwrap", 0o700)]


def mount_runtime_dirs(home: Path) -> dict[str, str]:
    """Puts each of ``runtime_dirs(home)`` on a tmpfs where it can; returns what became of
    each (path → ``mounted``, ``tmpfs already``, ``in use``, or why not)."""
    return {str(path): ensure_tmpfs(path, mode) for path, mode in runtime_dirs(home)}


def tmpfs_at(path: Path) -> bool:
    """Whether ``path`` is itself the mount point of a tmpfs."""
    return _mount_points().get(os.path.realpath(path)) == "tmpfs"


def unmount(path: Path) -> None:
    """Detaches the tmpfs at ``path`` (its files go with it); nothing if none is there."""
    if tmpfs_at(path):
        _libc.umount2(os.fsencode(path), _MNT_DETACH)


def ensure_tmpfs(path: Path, mode: int) -> str:
    """Mounts a tmpfs (``mode``, ``nosuid,nodev``) at ``path``, made if missing, unless it
    is on a tmpfs already, is a mount point of another file system, or is in use (it holds a
    file or a mount point: empty directories do not count). Returns what it did or found."""
    if os.geteuid() != 0:
        return "not root: left on its file system"
    try:
        path.mkdir(parents=True, exist_ok=True, mode=mode)
        real = os.path.realpath(path)
        mounts = _mount_points()
        on = _file_system_of(real, mounts)
        if on == "tmpfs":
            return "tmpfs already"
        if real in mounts:
            return f"a mount point of its own ({on}): left as it is"
        if _in_use(real, mounts):
            return "in use: left as it is until a start finds it empty"
        options = f"mode={mode:o}".encode()
        if _libc.mount(b"tmpfs", os.fsencode(real), b"tmpfs", _MS_NOSUID | _MS_NODEV, options):
            return f"mount refused: {os.strerror(ctypes.get_errno())}"
    except OSError as exc:
        return f"not mounted: {exc.strerror or exc}"
    return "mounted"


def _in_use(real: str, mounts: dict[str, str]) -> bool:
    """Whether the tree at ``real`` holds anything but empty directories (a file, a socket,
    a link, a mount point): what a tmpfs mounted over it would hide."""
    for root, directories, files in os.walk(real):
        if files or any(os.path.join(root, d) in mounts for d in directories):
            return True
        if any(os.path.islink(os.path.join(root, d)) for d in directories):
            return True
    return False


def _file_system_of(real: str, mounts: dict[str, str]) -> str:
    """The type of the file system ``real`` (a resolved path) lies on."""
    best = max((m for m in mounts if real == m or real.startswith(m.rstrip("/") + "/")), key=len)
    return mounts[best]


def _mount_points() -> dict[str, str]:
    """Mount point → file system type, as this process sees them (the last mount of a point
    wins, as the kernel's view does)."""
    found: dict[str, str] = {"/": ""}
    try:
        text = Path("/proc/self/mountinfo").read_text()
    except OSError:
        return found
    for line in text.splitlines():
        fields = line.split()
        try:
            separator = fields.index("-")
        except ValueError:
            continue
        point = fields[4].replace("\\040", " ").replace("\\011", "\t").replace("\\134", "\\")
        found[point] = fields[separator + 1]
    return found
