"""Team volumes (E2B's ``Volume``): named persistent disks a team creates, mounts into its
sandboxes at create (``volumeMounts``) and reads and writes through the volume file API.

Lifecycle: create makes the disk image (``_image``), then the row; delete removes the row, then
the image. The volume lives until deleted, across sandbox kills and gateway restarts. A
sandbox's create *claims* the volumes it names (held against deletion until its row names
them, ``mounted_by`` after that); deleting a volume any live sandbox mounts (running or
paused) is refused with 409, naming the sandboxes.

Sharing: like E2B, one volume may be mounted by several sandboxes of its team at once, and
used through the file API meanwhile. All of them see one file system (the host mount; each
sandbox an idmapped bind of it), so writes are visible at once and POSIX semantics hold between
them as between processes on one machine; there is no locking beyond that. Sandboxes of other
teams never see it (a volume of another team is "not found").

Trust: API callers are trusted with their own team's volumes. The file API authenticates with
a per-volume token (``Authorization: Bearer``), derived from the volume's id with the
install's key (``<home>/volumes/tokens.key``), compared in constant time; an unknown volume and
a wrong token get the same 401. File handling itself is ``files`` (B2).
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import errno
import hashlib
import hmac
import os
import re
import secrets
import string
import time
from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime
from functools import cached_property
from pathlib import Path, PurePosixPath
from typing import Any, Final, TypeVar

import structlog

from sandgate.errors import (
    Conflict,
    DiskFull,
    InvalidPath,
    InvalidRequest,
    NotFound,
    QuotaExceeded,
    RuntimeUnavailable,
    SandgateError,
    Unauthenticated,
)
from sandgate.runtimes import GUEST_DIR_IN_SANDBOX, VolumeMount
from sandgate.secrets.keyfile import install_key
from sandgate.store import Volume, VolumeRecords
from sandgate.volumes._image import MOUNT_DIR, allocated_bytes, ensure_mounted, make_image, unmount
from sandgate.volumes.files import VolumeFiles

__all__ = ["VolumeService"]

log = structlog.get_logger("sandgate.volumes")

T = TypeVar("T")

_ID_ALPHABET: Final = string.ascii_lowercase + string.digits
_ID: Final = re.compile(r"^[a-z0-9]{25}$")
#: E2B: "Volume names can only contain letters, numbers, and hyphens."
_NAME: Final = re.compile(r"^[A-Za-z0-9-]{1,128}$")
_MAX_MOUNTS: Final = 16
#: Paths a volume may not be mounted at (or under): the kernel's and Sandgate's own.
_RESERVED: Final = ("/proc", "/sys", "/dev", GUEST_DIR_IN_SANDBOX)
#: Host disk kept free beyond every volume's full size when a new one is made.
_HEADROOM_BYTES: Final = 256 * 1024 * 1024
_SUFFIX: Final = ".ext4"
#: A half-made image older than this was left by a crash (an image is made in seconds).
_STALE_TEMP_S: Final = 3600.0
_MIB: Final = 1024 * 1024


class VolumeService:
    def __init__(
        self,
        records: VolumeRecords,
        *,
        images_dir: Path,
        key_path: Path,
        size_mib: int,
        max_per_team: int,
    ) -> None:
        self._records = records
        self._images = images_dir
        self._key_path = key_path
        self._size_mib = size_mib
        self._max_per_team = max_per_team
        self._locks: dict[str, asyncio.Lock] = {}
        #: Volumes claimed by creates whose sandbox row does not name them yet.
        self._claims: dict[str, int] = {}

    # -- the control plane (``/volumes``) ---------------------------------------------------

    async def create(self, team_id: str, name: str) -> Volume:
        """Makes a volume of ``limits.volume_mib``. Raises ``InvalidRequest`` (the name),
        ``Conflict`` (the team has one of that name), ``QuotaExceeded``
        (``limits.max_volumes_per_team``), ``DiskFull`` (the host cannot hold it at full size),
        ``RuntimeUnavailable`` (the image could not be made). Nothing is left on failure."""
        if not isinstance(name, str) or not _NAME.fullmatch(name):
            raise InvalidRequest(
                f"volume name {str(name)[:80]!r} is not usable: use 1..128 letters, digits and "
                "hyphens"
            )
        if len(self._records.of_team(team_id)) >= self._max_per_team:
            raise QuotaExceeded(
                f"your team already has {self._max_per_team} volumes "
                "(limits.max_volumes_per_team); delete one first"
            )
        if self._records.by_name(team_id, name) is not None:
            raise Conflict(
                f"a volume named '{name}' already exists in your team; connect to it "
                "(Volume.connect) or pick another name"
            )
        volume_id = "".join(secrets.choice(_ID_ALPHABET) for _ in range(25))
        image = self._image(volume_id)
        await _thread(lambda: self._make(image))
        row = Volume(
            id=volume_id,
            team_id=team_id,
            name=name,
            size_mib=self._size_mib,
            created_at=datetime.now(UTC),
        )
        try:
            self._records.add(row)
        except BaseException:
            image.unlink(missing_ok=True)
            raise
        log.info("volume.created", volume=volume_id, team=team_id, size_mib=self._size_mib)
        return row

    def _make(self, image: Path) -> None:
        self._images.mkdir(parents=True, exist_ok=True, mode=0o700)
        self._check_host_space()
        make_image(image, self._size_mib)

    def _check_host_space(self) -> None:
        """SECURITY: images are sparse, so the host must be able to hold every volume at its
        full size (plus headroom), or a filling volume would hit host ENOSPC as I/O errors."""
        info = os.statvfs(self._images)
        free = info.f_bavail * info.f_frsize
        promised = 0
        for row in self._records.all():
            image = self._image(row.id)
            promised += max(row.size_mib * _MIB - allocated_bytes(image), 0)
        needed = self._size_mib * _MIB + promised + _HEADROOM_BYTES
        if free < needed:
            raise DiskFull(
                f"the server's volume disk cannot hold another volume of {self._size_mib} MiB "
                f"({free // _MIB} MiB free, {promised // _MIB} MiB still to be filled by "
                "existing volumes); delete volumes or give runtime.volumes_dir more space"
            )

    def of_team(self, team_id: str) -> list[Volume]:
        return list(self._records.of_team(team_id))

    def get(self, team_id: str, ref: str) -> Volume:
        """The team's volume whose id (or name) is ``ref``; raises ``NotFound``."""
        row = self._records.get(ref) if _ID.fullmatch(ref) else None
        if row is None or row.team_id != team_id:
            row = self._records.by_name(team_id, ref)
        if row is None:
            raise NotFound(f"volume '{ref[:100]}' not found in your team")
        return row

    async def delete(self, team_id: str, ref: str) -> None:
        """Deletes the volume and its data. Raises ``NotFound``, and ``Conflict`` naming the
        sandboxes while any live sandbox (running or paused) mounts it."""
        row = self.get(team_id, ref)
        async with self._lock(row.id):
            users = self._records.mounted_by(row.id)
            if users or self._claims.get(row.id):
                named = ", ".join(users[:5]) or "a sandbox being created"
                raise Conflict(
                    f"volume '{row.name}' is mounted by {named}; kill those sandboxes first, "
                    "then delete it"
                )
            self._records.delete(row.id)
            await _thread(lambda: self._remove(row.id))
        log.info("volume.deleted", volume=row.id, team=team_id)

    def _remove(self, volume_id: str) -> None:
        unmount(MOUNT_DIR / volume_id)
        self._image(volume_id).unlink(missing_ok=True)

    def token(self, row: Volume) -> str:
        """The volume's file API token (stable; no storage needed)."""
        digest = hmac.new(self._key, f"sandgate volume token v1\0{row.id}".encode(), hashlib.sha256)
        return "vtk_" + base64.urlsafe_b64encode(digest.digest()).decode().rstrip("=")

    @cached_property
    def _key(self) -> bytes:
        return install_key(self._key_path)

    # -- the file API (``/volumecontent``) --------------------------------------------------

    def authorize(self, volume_id: str, token: str | None) -> Volume:
        """The volume a file API call may use; ``Unauthenticated`` for an unknown volume or a
        wrong token alike (no existence oracle)."""
        row = self._records.get(volume_id) if _ID.fullmatch(volume_id) else None
        # An unknown volume is compared against a token nobody has: same work, same answer.
        expected = self.token(row) if row is not None else "vtk_" + secrets.token_urlsafe(32)
        presented = (token or "").encode()
        if row is None or not hmac.compare_digest(presented, expected.encode()):
            raise Unauthenticated("invalid volume token: use the token Volume.create/connect gave")
        return row

    async def run(self, row: Volume, operation: Callable[[VolumeFiles], T]) -> T:
        """Runs a blocking file operation on the mounted volume in a worker thread; leftover
        ``OSError``s become errors of the tree (a full volume is ``DiskFull``)."""
        files = await self.files(row)
        return await _thread(lambda: operation(files))

    async def files(self, row: Volume) -> VolumeFiles:
        mountpoint = MOUNT_DIR / row.id
        await _thread(lambda: ensure_mounted(self._image(row.id), mountpoint))
        return VolumeFiles(mountpoint, row.size_mib * _MIB)

    # -- sandboxes (``sandboxes.VolumeLender``) ---------------------------------------------

    async def claim(
        self, team_id: str, mounts: Sequence[Mapping[str, Any]]
    ) -> tuple[VolumeMount, ...]:
        """Resolves ``[{"name", "path"}]`` to mounts (parents before children) and holds the
        volumes against deletion until ``release``. Raises ``InvalidRequest`` (a bad or
        reserved path, two volumes at one path, too many) and ``NotFound`` (no such volume in
        the team)."""
        if len(mounts) > _MAX_MOUNTS:
            raise InvalidRequest(f"volumeMounts may name at most {_MAX_MOUNTS} volumes")
        wanted: list[tuple[str, str]] = []
        for index, mount in enumerate(mounts):
            name, path = mount.get("name"), mount.get("path")
            if not isinstance(name, str) or not isinstance(path, str):
                raise InvalidRequest(f"volumeMounts[{index}] needs a name and a path")
            wanted.append((name, check_mount_path(path, f"volumeMounts[{index}]")))
        paths = [path for _, path in wanted]
        if len(set(paths)) != len(paths):
            raise InvalidRequest("volumeMounts: two volumes are mounted at one path")
        claimed: list[VolumeMount] = []
        try:
            for name, path in sorted(wanted, key=lambda pair: pair[1].count("/")):
                row = self._records.by_name(team_id, name)
                if row is None:
                    raise NotFound(
                        f"volumeMounts: volume '{name[:100]}' not found in your team (create "
                        "it with Volume.create)"
                    )
                async with self._lock(row.id):
                    if self._records.get(row.id) is None:
                        raise NotFound(f"volumeMounts: volume '{name[:100]}' was just deleted")
                    files = await self.files(row)
                    self._claims[row.id] = self._claims.get(row.id, 0) + 1
                claimed.append(VolumeMount(row.id, row.name, files.root, path))
        except BaseException:
            self.release(claimed)
            raise
        return tuple(claimed)

    def release(self, mounts: Sequence[VolumeMount]) -> None:
        for mount in mounts:
            left = self._claims.get(mount.volume_id, 0) - 1
            if left > 0:
                self._claims[mount.volume_id] = left
            else:
                self._claims.pop(mount.volume_id, None)

    # -- housekeeping -----------------------------------------------------------------------

    async def sweep(self) -> None:
        """Tidies what a crash left behind: half-made images older than an hour are removed;
        an image with no volume row (its delete was cut short) is reported, never removed, in
        case the directory is shared with another installation."""
        await _thread(self._sweep)

    def _sweep(self) -> None:
        if not self._images.is_dir():
            return
        known = {row.id for row in self._records.all()}
        stale = time.time() - _STALE_TEMP_S
        for path in self._images.iterdir():
            if path.name.startswith(".") and path.name.endswith(".tmp"):
                with contextlib.suppress(OSError):
                    if path.stat().st_mtime < stale:
                        path.unlink()
                        log.info("volume.temp_removed", file=path.name)
            elif path.suffix == _SUFFIX and _ID.fullmatch(path.stem) and path.stem not in known:
                log.warning(
                    "volume.orphan_image",
                    file=str(path),
                    hint="no volume names this image (a delete cut short?); remove it by hand "
                    "if no other installation uses this directory",
                )

    def _image(self, volume_id: str) -> Path:
        return self._images / f"{volume_id}{_SUFFIX}"

    def _lock(self, volume_id: str) -> asyncio.Lock:
        return self._locks.setdefault(volume_id, asyncio.Lock())


def check_mount_path(path: str, where: str) -> str:
    """A mount path in canonical form; raises ``InvalidRequest`` for a relative, odd or
    reserved one (``/``, ``/proc``, ``/sys``, ``/dev``, ``/run/sandgate`` and below)."""
    if not path.startswith("/") or len(path) > 1024 or any(ord(c) < 0x20 for c in path):
        raise InvalidPath(f"{where}: '{path[:100]}' must be an absolute path")
    parts = [p for p in path.split("/") if p not in ("", ".")]
    if not parts or ".." in parts:
        raise InvalidPath(f"{where}: '{path[:100]}' must name a directory below '/' without '..'")
    canonical = str(PurePosixPath("/", *parts))
    for reserved in _RESERVED:
        if canonical == reserved or canonical.startswith(reserved + "/"):
            raise InvalidPath(f"{where}: a volume cannot be mounted at {reserved} or below it")
    return canonical


async def _thread(func: Callable[[], T]) -> T:
    try:
        return await asyncio.to_thread(func)
    except SandgateError:
        raise
    except OSError as exc:
        raise _translate(exc) from None


def _translate(exc: OSError) -> SandgateError:
    if exc.errno in (errno.ENOSPC, errno.EDQUOT):
        return DiskFull("the volume is full; free space in it or use another volume")
    if exc.errno == errno.ENAMETOOLONG:
        return InvalidPath("a name in the path is too long")
    if exc.errno == errno.ENOTEMPTY:
        return Conflict("the directory is not empty")
    if exc.errno == errno.EEXIST:
        return Conflict("something already exists at that path")
    if exc.errno in (errno.ENOTDIR, errno.ENOENT):
        return NotFound("the path was not found in the volume")
    if exc.errno == errno.EISDIR:
        return Conflict("the path is a directory")
    return RuntimeUnavailable(f"volume operation failed: {exc.strerror}")
