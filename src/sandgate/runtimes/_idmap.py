"""Idmapped mounts: one template tree, seen by each sandbox as owned by its own root.

A template's root file system is one directory tree owned by host uids 0..65535, shared by
every sandbox of the template. Each sandbox runs in a user namespace that maps its ids to a
host range of its own (``_uids``), where host uid 0 is unmapped, so the tree would look owned
by ``nobody`` and sandbox root could change nothing. An *idmapped* bind mount of the tree
(``mount_setattr(MOUNT_ATTR_IDMAP)``, Linux 5.12+; overlayfs accepts such a mount as a lower
layer since 5.19) shows host id ``k`` as ``base + k``: the sandbox's root owns ``/usr`` the way
root owns it in the image, while the tree on disk never changes.

The mapping is given by a user namespace: one per uid slot, made once and kept open for the
life of the process (a slot's mapping never changes). It is created *as the slot's first host
uid* (so that uid owns it, and per-user kernel counts of anything in it are charged there, not
to root), its maps are written by the gateway, and nested user namespaces are locked inside it
(``user.max_user_namespaces=0``). Docker sandboxes of the slot run in this same namespace
(``slot_userns``; Sandgate's OCI shim has runc join it), and so do bubblewrap sandboxes
(``bwrap --userns``).

Trust: root (the gateway) makes these mounts on the host; nothing of the sandbox holds the
namespace fds (bubblewrap passes the one it joins on to the guest, which closes it before it
serves anything) and the sandbox cannot remount anything (no ``CAP_SYS_ADMIN`` over the host's
mounts).
"""

from __future__ import annotations

import ctypes
import os
import shutil
import struct
import subprocess
import threading
from pathlib import Path

from sandgate.errors import RuntimeUnavailable

__all__ = [
    "MOUNT_ATTR_NODEV",
    "MOUNT_ATTR_NOSUID",
    "MOUNT_ATTR_RDONLY",
    "idmapped_bind",
    "slot_userns",
]

_libc = ctypes.CDLL(None, use_errno=True)
# The new mount API's syscall numbers are the same on every architecture (asm-generic).
_SYS_OPEN_TREE = 428
_SYS_MOVE_MOUNT = 429
_SYS_MOUNT_SETATTR = 442
_AT_FDCWD = -100
_AT_EMPTY_PATH = 0x1000
_OPEN_TREE_CLONE = 1
_MOVE_MOUNT_F_EMPTY_PATH = 0x4
MOUNT_ATTR_RDONLY = 0x1
MOUNT_ATTR_NOSUID = 0x2
MOUNT_ATTR_NODEV = 0x4
_MOUNT_ATTR_IDMAP = 0x00100000
_HELPER_TIMEOUT_S = 10.0

_namespaces: dict[int, int] = {}
_lock = threading.Lock()
_range_locks: dict[int, threading.Lock] = {}


def idmapped_bind(source: Path, target: Path, base: int, size: int, attrs: int = 0) -> None:
    """Mounts ``source`` at ``target`` (an existing directory) with host ids ``0..size-1``
    shown as ``base..base+size-1``, plus ``attrs`` (``MOUNT_ATTR_*``)."""
    userns = slot_userns(base, size)
    tree = _libc.syscall(
        _SYS_OPEN_TREE, _AT_FDCWD, os.fsencode(source), _OPEN_TREE_CLONE | os.O_CLOEXEC
    )
    if tree < 0:
        _fail("open_tree", source)
    try:
        # struct mount_attr { u64 attr_set; u64 attr_clr; u64 propagation; u64 userns_fd; }
        attr = struct.pack("QQQQ", _MOUNT_ATTR_IDMAP | attrs, 0, 0, userns)
        if _libc.syscall(_SYS_MOUNT_SETATTR, tree, b"", _AT_EMPTY_PATH, attr, len(attr)) < 0:
            _fail("mount_setattr(MOUNT_ATTR_IDMAP)", source)
        moved = _libc.syscall(
            _SYS_MOVE_MOUNT, tree, b"", _AT_FDCWD, os.fsencode(target), _MOVE_MOUNT_F_EMPTY_PATH
        )
        if moved < 0:
            _fail("move_mount", target)
    finally:
        os.close(tree)


def _fail(what: str, path: Path) -> None:
    error = ctypes.get_errno()
    hint = ""
    if what.startswith("mount_setattr"):
        hint = (
            " (idmapped mounts need Linux >= 5.19 and a file system that supports them, such "
            "as ext4, xfs, btrfs or tmpfs >= 6.3, under the root file system cache)"
        )
    raise RuntimeUnavailable(f"{what} on {path} failed: {os.strerror(error)}{hint}")


def slot_userns(base: int, size: int) -> int:
    """An fd of the user namespace owned by host uid ``base`` that maps ``0..size-1`` to
    ``base..``, with nested user namespaces locked; made once per range."""
    # One lock per range, not one for all: making a namespace runs a helper process, and the
    # creates of a burst (each on its own claimed range) must not wait for one another's.
    with _lock:
        fd = _namespaces.get(base)
        if fd is not None:
            return fd
        range_lock = _range_locks.setdefault(base, threading.Lock())
    with range_lock:
        fd = _namespaces.get(base)
        if fd is None:
            fd = _make_userns(base, size)
            with _lock:
                _namespaces[base] = fd
        return fd


def _make_userns(base: int, size: int) -> int:
    tools = {name: shutil.which(name) for name in ("setpriv", "unshare")}
    if None in tools.values():
        raise RuntimeUnavailable(
            "user namespaces need setpriv and unshare: apt-get install util-linux"
        )
    # As ``base`` (no privilege, no groups) the helper makes the namespace and says "ready".
    # Once the maps are written it execs again: a process gets its capabilities in a user
    # namespace at exec, and only now is it that namespace's root; it locks nested namespaces,
    # then waits (a builtin ``read``) until this process has opened the namespace.
    script = (
        "echo ready; read go; exec /bin/sh -c "
        "'echo 0 > /proc/sys/user/max_user_namespaces || exit 1; echo locked; read done'"
    )
    helper = subprocess.Popen(
        [
            str(tools["setpriv"]),
            f"--reuid={base}",
            f"--regid={base}",
            "--clear-groups",
            "--",
            str(tools["unshare"]),
            "--user",
            "--",
            "/bin/sh",
            "-c",
            script,
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        cwd="/",
        env={"PATH": "/usr/sbin:/usr/bin:/sbin:/bin"},
    )
    try:
        assert helper.stdout is not None and helper.stdin is not None
        if helper.stdout.readline() != b"ready\n":
            raise RuntimeUnavailable(_helper_failed(helper))
        mapping = f"0 {base} {size}\n"
        for name in ("uid_map", "gid_map"):
            with open(f"/proc/{helper.pid}/{name}", "w") as file:
                file.write(mapping)
        helper.stdin.write(b"go\n")
        helper.stdin.flush()
        if helper.stdout.readline() != b"locked\n":
            raise RuntimeUnavailable(_helper_failed(helper))
        return os.open(f"/proc/{helper.pid}/ns/user", os.O_RDONLY | os.O_CLOEXEC)
    finally:
        if helper.stdin is not None:
            helper.stdin.close()
        try:
            helper.wait(_HELPER_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            helper.kill()
            helper.wait()
        for stream in (helper.stdout, helper.stderr):
            if stream is not None:
                stream.close()


def _helper_failed(helper: subprocess.Popen[bytes]) -> str:
    helper.kill()
    why = (helper.stderr.read() if helper.stderr else b"").decode(errors="replace")[:200]
    return f"cannot create the sandbox's user namespace: {why.strip() or 'the helper failed'}"
