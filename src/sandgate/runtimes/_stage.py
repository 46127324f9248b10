"""Mount staging: a sandbox's whole file system, assembled on the host before it starts.

Both runtimes give a sandbox the same view (design §2, "a full machine inside, a hard wall
outside"), prepared here under ``/run/sandgate-rt/stage/<sandbox id>/`` (mode 0700, owned by the
sandbox's root uid, which bubblewrap runs as)::

    lower/   the template's tree, idmapped to the sandbox's uid range; read-only, nosuid, nodev
    disk/    tmpfs of limits.disk_mib with an inode cap, nosuid, nodev: the sandbox's disk
      upper/   its copy-on-write layer (every write inside lands here)
      work/    overlayfs's scratch directory
      log/     the guest's log (bounded by the same quota, invisible inside)
    root/    overlay(lower, upper): the sandbox's "/", writable, nosuid, nodev
    pts/     a devpts instance of its own, capped at limits.max_ptys (RES-14)
    run/     the sandbox's host directory (guest code, sockets, tool stubs), read-only
    volumes/<n>  the team volumes it mounts (``volumes``), idmapped to its uid range, nosuid,
             nodev; the runtimes bind each at the path the create call asked for
    userns   (Docker) the slot's user namespace, bind-mounted for runc to join
    stage.json  who owns this stage, for the runtimes and Sandgate's OCI runtime shim

What this buys: any path is writable by the sandbox's root, and by its users where the image
allows it; programs run from anywhere (no ``noexec``), never setuid (``nosuid`` everywhere) and
never on devices (``nodev``); a full disk is ENOSPC inside, charged to the sandbox's memory
cgroup (the runtimes add the disk to the memory limit), never host disk; the layer lives as
long as the mounts, so it survives pause/resume and gateway restarts, and goes with the kill.

Trust: the image content is untrusted (a link in it may point anywhere on the host). The host
only writes into the merged tree through ``_seed``, which never follows a link; everything
else the sandbox's own processes do, as its uids, inside its namespaces.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import json
import os
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sandgate.errors import RuntimeUnavailable
from sandgate.runtimes._devpts import TTY_GID
from sandgate.runtimes._idmap import (
    MOUNT_ATTR_NODEV,
    MOUNT_ATTR_NOSUID,
    MOUNT_ATTR_RDONLY,
    idmapped_bind,
    slot_userns,
)
from sandgate.runtimes._layer import LayerStats, export_layer, import_layer, layer_usage
from sandgate.runtimes._uids import RUNTIME_DIR, UIDS_PER_SANDBOX

__all__ = [
    "GUEST_ARCHIVE",
    "STAGE_DIR",
    "Seed",
    "Stage",
    "inode_limit",
    "layer_in_use",
    "save_layer",
    "stage_sandbox",
    "staged",
    "unstage",
]

STAGE_DIR = RUNTIME_DIR / "stage"
#: The guest's archive in a sandbox's host directory (``/run/sandgate/guest.pyz`` inside).
GUEST_ARCHIVE = "guest.pyz"
#: Inodes per MiB of the sandbox's disk: one per 16 KiB, ext4's default ratio.
INODES_PER_MB = 64
_STAGE_FILE = "stage.json"
_VOLUMES = "volumes"
#: Mount points, in the order they are unmounted (``userns`` is a file).
_MOUNTS = ("root", "lower", "pts", "run", "disk", "userns")

_libc = ctypes.CDLL(None, use_errno=True)
_MS_RDONLY = 1
_MS_NOSUID = 2
_MS_NODEV = 4
_MS_NOEXEC = 8
_MS_REMOUNT = 32
_MS_BIND = 4096
_MNT_DETACH = 2


@dataclass(frozen=True)
class Seed:
    """A file the host puts into a sandbox's layer before it starts (``/etc/hosts``, the
    ``sudo`` shim), owned by the sandbox's root."""

    path: str
    data: bytes
    mode: int = 0o644


@dataclass(frozen=True)
class Stage:
    path: Path

    @property
    def root(self) -> Path:
        return self.path / "root"

    @property
    def pts(self) -> Path:
        return self.path / "pts"

    @property
    def run(self) -> Path:
        return self.path / "run"

    @property
    def log(self) -> Path:
        return self.path / "disk" / "log" / "guest.log"

    @property
    def disk(self) -> Path:
        """The sandbox's disk: the tmpfs its layer and the guest's log live on."""
        return self.path / "disk"

    @property
    def upper(self) -> Path:
        return self.path / "disk" / "upper"

    def volume(self, index: int) -> Path:
        """Where the ``index``-th volume of ``stage_sandbox(volumes=...)`` is bound."""
        return self.path / _VOLUMES / str(index)

    def info(self) -> dict[str, Any]:
        return read_info(self.path.name)


def inode_limit(size_mb: int) -> int:
    """The inode cap of an in-memory file system of ``size_mb`` MiB."""
    return max(size_mb * INODES_PER_MB, 4096)


def stage_sandbox(
    sandbox_id: str,
    *,
    base: int,
    tree: Path,
    host_dir: Path,
    disk_mib: int,
    max_ptys: int,
    seeds: tuple[Seed, ...] = (),
    info: Mapping[str, Any] | None = None,
    userns: bool = False,
    volumes: Sequence[Path] = (),
    layer: Path | None = None,
    guest: Path | None = None,
) -> Stage:
    """Builds the stage for ``sandbox_id`` (uid range starting at host uid ``base``) from the
    template tree ``tree``; on failure nothing is left mounted. ``info`` is recorded in
    ``stage.json`` next to the paths; ``userns`` also binds the slot's user namespace at
    ``<stage>/userns`` (for runtimes that join one instead of making it); each of ``volumes``
    (a volume's host mount) is bound at ``stage.volume(n)``, idmapped like the template.
    ``layer`` is a layer archive (``save_layer``) the sandbox's layer starts as: a snapshot's
    or a paused sandbox's files, restored into this range before the overlay is mounted.
    ``guest`` (the guest's archive, shared) is bound read-only over ``run/guest.pyz``, a
    placeholder in the host directory: memory for one copy, not one per sandbox."""
    STAGE_DIR.mkdir(parents=True, exist_ok=True)
    for path in (RUNTIME_DIR, STAGE_DIR):
        path.chmod(0o711)
    stage = Stage(STAGE_DIR / sandbox_id)
    try:
        stage.path.mkdir(mode=0o700)
    except FileExistsError:
        raise RuntimeUnavailable(f"sandbox {sandbox_id} is already staged") from None
    os.chown(stage.path, base, base)
    try:
        _write_info(
            stage,
            {
                **(info or {}),
                "sandbox_id": sandbox_id,
                "uid_base": base,
                "uid_count": UIDS_PER_SANDBOX,
                "tree": str(tree),
                "host_dir": str(host_dir),
                "root": str(stage.root),
                "userns": str(stage.path / "userns") if userns else None,
            },
        )
        if userns:
            target = stage.path / "userns"
            target.touch(mode=0o600)
            fd = slot_userns(base, UIDS_PER_SANDBOX)
            source = f"/proc/self/fd/{fd}".encode()
            if _libc.mount(source, os.fsencode(target), None, _MS_BIND, None) != 0:
                _raise("bind of the user namespace", target)
        lower = stage.path / "lower"
        lower.mkdir()
        idmapped_bind(
            tree,
            lower,
            base,
            UIDS_PER_SANDBOX,
            MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV,
        )
        disk = stage.path / "disk"
        options = f"size={disk_mib}m,nr_inodes={inode_limit(disk_mib)},mode=0711"
        _mount(b"tmpfs", disk, b"tmpfs", _MS_NOSUID | _MS_NODEV, options.encode())
        top = os.stat(lower)
        upper, work, log = disk / "upper", disk / "work", disk / "log"
        upper.mkdir(mode=0o755)
        os.chown(upper, top.st_uid, top.st_gid)
        upper.chmod(top.st_mode & 0o7777)
        work.mkdir(mode=0o700)
        log.mkdir(mode=0o700)
        if layer is not None:
            import_layer(layer, upper, base, disk_mib=disk_mib)
        overlay = f"lowerdir={lower},upperdir={upper},workdir={work}"
        _mount(b"overlay", stage.root, b"overlay", _MS_NOSUID | _MS_NODEV, overlay.encode())
        pts = f"newinstance,max={max_ptys},ptmxmode=0666,mode=0620,gid={base + TTY_GID}"
        _mount(b"devpts", stage.pts, b"devpts", _MS_NOSUID | _MS_NOEXEC, pts.encode())
        _mount(os.fsencode(host_dir), stage.run, None, _MS_BIND, None)
        if guest is not None:
            # Below the host directory's bind: unmounting that one (``unstage``) detaches it
            # too. Its own flags, locked for the sandbox's user namespace like the others.
            archive = stage.run / GUEST_ARCHIVE
            if _libc.mount(os.fsencode(guest), os.fsencode(archive), None, _MS_BIND, None):
                _raise("bind of the guest's archive", archive)
            _remount_read_only(archive)
        _remount_read_only(stage.run)
        for seed in seeds:
            _seed(stage.root, seed, base)
        if volumes:
            (stage.path / _VOLUMES).mkdir(mode=0o700)
            os.chown(stage.path / _VOLUMES, base, base)
        for index, volume in enumerate(volumes):
            target = stage.volume(index)
            target.mkdir()
            # SECURITY: the volume's files are stored with sandbox-relative ids (0..65535);
            # the idmap shows them as this sandbox's range only, and nosuid/nodev are locked
            # for whoever is inside (their user namespace cannot clear them).
            idmapped_bind(
                volume, target, base, UIDS_PER_SANDBOX, MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV
            )
    except BaseException:
        unstage(sandbox_id)
        raise
    return stage


def unstage(sandbox_id: str) -> None:
    """Unmounts and removes a sandbox's stage (its disk goes with it); idempotent."""
    path = STAGE_DIR / sandbox_id
    volumes = path / _VOLUMES
    if volumes.is_dir() and not volumes.is_symlink():
        for bound in volumes.iterdir():
            _libc.umount2(os.fsencode(bound), _MNT_DETACH)
            with contextlib.suppress(OSError):
                bound.rmdir()
        with contextlib.suppress(OSError):
            volumes.rmdir()
    for name in _MOUNTS:
        target = path / name
        if os.path.lexists(target):
            _libc.umount2(os.fsencode(target), _MNT_DETACH)
            with contextlib.suppress(OSError):
                if target.is_dir():
                    target.rmdir()
                else:
                    target.unlink()
    with contextlib.suppress(FileNotFoundError):
        (path / _STAGE_FILE).unlink()
    with contextlib.suppress(OSError):
        path.rmdir()


def save_layer(sandbox_id: str, archive: Path) -> LayerStats:
    """Writes the staged sandbox's layer (``disk/upper``) to ``archive`` with owners relative
    to its uid range (``_layer``); the sandbox must be frozen."""
    base = read_info(sandbox_id).get("uid_base")
    if not isinstance(base, int):
        raise RuntimeUnavailable(f"sandbox {sandbox_id} is not staged on this host")
    return export_layer(Stage(STAGE_DIR / sandbox_id).upper, base, archive)


def layer_in_use(sandbox_id: str) -> int:
    """Bytes in use on the staged sandbox's disk: what ``save_layer`` writes at most (plus
    archive headers)."""
    upper = Stage(STAGE_DIR / sandbox_id).upper
    if not upper.is_dir():
        raise RuntimeUnavailable(f"sandbox {sandbox_id} is not staged on this host")
    return layer_usage(upper)


def staged() -> Iterator[str]:
    """Ids of every staged sandbox on this host (of any Sandgate instance)."""
    if STAGE_DIR.is_dir():
        for path in STAGE_DIR.iterdir():
            if path.is_dir():
                yield path.name


def read_info(sandbox_id: str) -> dict[str, Any]:
    """What ``stage_sandbox`` recorded, or ``{}``."""
    try:
        data = json.loads((STAGE_DIR / sandbox_id / _STAGE_FILE).read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def _write_info(stage: Stage, info: Mapping[str, Any]) -> None:
    temp = stage.path / f".{_STAGE_FILE}.tmp"
    temp.write_text(json.dumps(dict(info)))
    temp.chmod(0o600)
    temp.rename(stage.path / _STAGE_FILE)


def _mount(
    source: bytes, target: Path, fstype: bytes | None, flags: int, options: bytes | None
) -> None:
    target.mkdir(exist_ok=True)
    if _libc.mount(source, os.fsencode(target), fstype, flags, options) != 0:
        _raise(f"mount of {source.decode(errors='replace')}", target)


def _remount_read_only(target: Path) -> None:
    """Makes the bind mount at ``target`` read-only, nosuid and nodev."""
    flags = _MS_REMOUNT | _MS_BIND | _MS_RDONLY | _MS_NOSUID | _MS_NODEV
    if _libc.mount(None, os.fsencode(target), None, flags, None) != 0:
        _raise("read-only remount", target)


def _raise(what: str, target: Path) -> None:
    error = ctypes.get_errno()
    raise RuntimeUnavailable(f"cannot stage the sandbox: {what} at {target}: {os.strerror(error)}")


def _seed(root: Path, seed: Seed, uid: int) -> None:
    """Writes ``seed`` under ``root`` as the sandbox's root (host uid ``uid``).

    SECURITY: ``root`` is the image's tree, which may hold links to anywhere on the host; the
    host runs as root here. Every directory is opened with ``O_NOFOLLOW`` relative to the one
    before (a link anywhere on the way skips the seed), and the file itself is created
    ``O_EXCL | O_NOFOLLOW`` after removing whatever entry was there (a link is removed, never
    followed).
    """
    parts = [p for p in seed.path.split("/") if p]
    if not parts or any(p in (".", "..") for p in parts):
        raise ValueError(f"bad seed path {seed.path!r}")
    dir_fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    try:
        for part in parts[:-1]:
            try:
                next_fd = os.open(
                    part, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=dir_fd
                )
            except FileNotFoundError:
                os.mkdir(part, 0o755, dir_fd=dir_fd)
                os.chown(part, uid, uid, dir_fd=dir_fd, follow_symlinks=False)
                next_fd = os.open(
                    part, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=dir_fd
                )
            except OSError as exc:
                if exc.errno in (errno.ELOOP, errno.ENOTDIR):
                    return  # a link or a file on the way: the image keeps its own
                raise
            os.close(dir_fd)
            dir_fd = next_fd
        name = parts[-1]
        with contextlib.suppress(FileNotFoundError, IsADirectoryError):
            os.unlink(name, dir_fd=dir_fd)
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
        try:
            fd = os.open(name, flags, seed.mode, dir_fd=dir_fd)
        except (FileExistsError, IsADirectoryError):
            return  # a directory stands there: the image keeps it
        try:
            os.write(fd, seed.data)
            os.fchown(fd, uid, uid)
            os.fchmod(fd, seed.mode)
        finally:
            os.close(fd)
    finally:
        os.close(dir_fd)
