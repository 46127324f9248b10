"""The volume file API's operations, done by the gateway on a volume's host mount.

Trust: this is host-side handling of tenant-controlled data (security.md B2, FILE-*). The
gateway runs as root, and whatever is in a volume was possibly written by a sandbox that
mounts it *right now*: links to host paths, links swapped in mid-operation (FILE-05), FIFOs,
hard links. Nothing here may touch anything outside the volume, under any race. How:

* every path is resolved with ``openat2(RESOLVE_IN_ROOT | RESOLVE_NO_MAGICLINKS |
  RESOLVE_NO_XDEV)`` from an fd of the volume's root: the kernel resolves links *as if the
  volume were ``/``* (``/etc/passwd`` in a link means the volume's own ``etc/passwd``),
  atomically, refuses ``/proc`` magic links and never leaves the volume's mount;
* an operation on an entry (create, rename, unlink, chown, chmod) resolves its *parent* that
  way, pins it as an fd, and acts on the last component relative to that fd without following
  it (``O_NOFOLLOW``, ``AT_SYMLINK_NOFOLLOW``, ``fchownat(AT_EMPTY_PATH)`` on an ``O_PATH`` fd):
  a link in the last place is the object, never followed (FILE-04, Judge0's ``chown``);
* reads require a regular file, opened ``O_NONBLOCK`` and checked with ``fstat`` (FILE-08);
  a file larger than the volume (sparse) is refused (FILE-16);
* writes go to a new file (``O_EXCL``) in the target directory, then ``renameat`` over the
  name: never through an existing inode, so a hard link (FILE-07) or a link at the name
  (FILE-04) is replaced, not written through; a failed write leaves nothing behind;
* recursion (list, remove) is iterative and walks one name at a time with ``O_NOFOLLOW``
  from a pinned fd, holding two fds at most, with caps (FILE-10): a link is listed or
  unlinked, never entered.

Ownership: ids in a volume are sandbox-relative (0..65535; ``_image``); new entries belong to
their parent directory's owner unless the caller names one. Left to other layers: who may
call (a volume token, ``api.e2b.volume_content``), how big a volume is (its file system).
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import os
import secrets
import stat
import struct
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Final

from sandgate.errors import (
    Conflict,
    DiskFull,
    InvalidPath,
    InvalidRequest,
    NotFound,
    PayloadTooLarge,
)

__all__ = ["MAX_ID", "Entry", "Upload", "VolumeFiles", "check_volume_path"]

_libc = ctypes.CDLL(None, use_errno=True)
_SYS_OPENAT2: Final = 437
_RESOLVE_NO_XDEV: Final = 0x01
_RESOLVE_NO_MAGICLINKS: Final = 0x02
_RESOLVE_IN_ROOT: Final = 0x10
_RESOLVE: Final = _RESOLVE_IN_ROOT | _RESOLVE_NO_MAGICLINKS | _RESOLVE_NO_XDEV
_AT_EMPTY_PATH: Final = 0x1000
#: Highest uid/gid a volume may hold: the sandboxes' ids are 0..65535.
MAX_ID: Final = 65535
_MAX_PATH: Final = 4096
_MAX_NAME: Final = 255
_MAX_DEPTH: Final = 32
_MAX_ENTRIES: Final = 10_000
_CHUNK: Final = 1024 * 1024
_RETRIES: Final = 8
_TEMP_PREFIX: Final = ".sandgate-upload-"
#: Passes a removal may take over a tree a sandbox keeps refilling (then ``Conflict``).
_REMOVE_STEPS: Final = 16
#: Directory fds a tree walk holds at most (deeper ones are re-opened by name).
_FD_WINDOW: Final = 64


def check_volume_path(path: str) -> list[str]:
    """``path`` (absolute or relative to the volume's root) as its components; ``[]`` is the
    root. Raises ``InvalidPath`` for NUL or control characters, ``..``, or oversized names."""
    if not isinstance(path, str) or len(path.encode()) > _MAX_PATH:
        raise InvalidPath(f"a volume path is a string of at most {_MAX_PATH} bytes")
    if any(ord(c) < 0x20 or ord(c) == 0x7F for c in path):
        raise InvalidPath("a volume path cannot contain NUL or control characters")
    parts = [p for p in path.split("/") if p not in ("", ".")]
    for part in parts:
        if part == "..":
            raise InvalidPath(f"'{path[:200]}': '..' is not allowed in volume paths")
        if len(part.encode()) > _MAX_NAME:
            raise InvalidPath(f"'{part[:60]}...': a name has at most {_MAX_NAME} bytes")
    return parts


@dataclass(frozen=True)
class Entry:
    """One entry as the SDK's ``VolumeEntryStat`` describes it."""

    name: str
    type: str
    path: str
    size: int
    mode: int
    uid: int
    gid: int
    atime: datetime
    mtime: datetime
    ctime: datetime
    target: str | None = None

    def as_json(self) -> dict[str, Any]:
        body: dict[str, Any] = {
            "name": self.name,
            "type": self.type,
            "path": self.path,
            "size": self.size,
            "mode": self.mode,
            "uid": self.uid,
            "gid": self.gid,
            "atime": _time(self.atime),
            "mtime": _time(self.mtime),
            "ctime": _time(self.ctime),
        }
        if self.target is not None:
            body["target"] = self.target
        return body


def _time(moment: datetime) -> str:
    return moment.isoformat().replace("+00:00", "Z")


class VolumeFiles:
    """File operations inside one mounted volume. Blocking: call from a worker thread."""

    def __init__(self, root: Path, capacity_bytes: int) -> None:
        self.root = root
        self._capacity = capacity_bytes

    # -- reading ----------------------------------------------------------------------------

    def stat(self, path: str) -> Entry:
        """The entry at ``path`` itself (a link is described, not followed); ``NotFound``."""
        parts = check_volume_path(path)
        with self._parent(parts) as (parent, name):
            return self._entry(parent, name, "/" + "/".join(parts))

    def list_dir(self, path: str, depth: int) -> list[Entry]:
        """Entries under the directory at ``path``, ``depth`` levels deep (1: its children),
        breadth first. Raises ``NotFound``, ``InvalidRequest`` (not a directory; more than
        ``_MAX_ENTRIES`` entries). Holds two fds at most, however wide or deep the tree."""
        if not 1 <= depth <= _MAX_DEPTH:
            raise InvalidRequest(f"depth must be between 1 and {_MAX_DEPTH}")
        parts = check_volume_path(path)
        top = self._open(parts, os.O_RDONLY | os.O_DIRECTORY)
        entries: list[Entry] = []
        base = "/" + "/".join(parts)
        queue: list[list[str]] = [[]]
        try:
            while queue:
                trail = queue.pop(0)
                dir_fd = _walk(top, trail)
                if dir_fd is None:
                    continue  # replaced or removed meanwhile
                try:
                    for name in sorted(os.listdir(dir_fd)):
                        if len(entries) >= _MAX_ENTRIES:
                            raise InvalidRequest(
                                f"more than {_MAX_ENTRIES} entries: list a subdirectory or "
                                "use a smaller depth"
                            )
                        child = "/".join([base.rstrip("/"), *trail, name])
                        try:
                            entry = self._entry(dir_fd, name, child)
                        except NotFound:
                            continue  # removed meanwhile
                        entries.append(entry)
                        if entry.type == "directory" and len(trail) + 1 < depth:
                            queue.append([*trail, name])
                finally:
                    os.close(dir_fd)
        finally:
            os.close(top)
        return entries

    def open_for_reading(self, path: str) -> tuple[int, int]:
        """An fd of the regular file at ``path`` (links resolved inside the volume) and its
        size; the caller closes it. Raises ``NotFound``, ``InvalidRequest`` (not a regular
        file) and ``PayloadTooLarge`` (larger than the volume: a sparse file)."""
        parts = check_volume_path(path)
        fd = self._open(parts, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY)
        try:
            info = os.fstat(fd)
            if not stat.S_ISREG(info.st_mode):
                raise InvalidRequest(f"'{path[:200]}' is not a regular file")
            if info.st_size > self._capacity:
                raise PayloadTooLarge(
                    f"'{path[:200]}' claims {info.st_size} bytes, more than the volume holds "
                    "(a sparse file); read it from inside a sandbox"
                )
        except BaseException:
            os.close(fd)
            raise
        return fd, info.st_size

    # -- writing ----------------------------------------------------------------------------

    def make_dir(
        self, path: str, *, uid: int | None, gid: int | None, mode: int | None, parents: bool
    ) -> tuple[Entry, bool]:
        """Creates the directory at ``path`` (and missing parents, with ``parents``); returns
        it and whether it was created. Raises ``NotFound`` (a missing parent, without
        ``parents``), ``Conflict`` (it exists and ``parents`` is not set; or a file is in the
        way), ``InvalidRequest``."""
        parts = check_volume_path(path)
        if not parts:
            if parents:
                return self.stat("/"), False
            raise Conflict("the volume's root directory always exists")
        _check_owner(uid, gid, mode)
        with self._parent(parts, create=parents) as (parent, name):
            created = _make_dir(parent, name, uid, gid, 0o755 if mode is None else mode)
            if not created and not parents:
                raise Conflict(f"'{path[:200]}' already exists")
            entry = self._entry(parent, name, "/" + "/".join(parts))
            if entry.type != "directory":
                raise Conflict(f"'{path[:200]}' exists and is not a directory")
            return entry, created

    def start_upload(
        self,
        path: str,
        *,
        uid: int | None,
        gid: int | None,
        mode: int | None,
        parents: bool,
    ) -> Upload:
        """Begins writing the file at ``path`` (see ``Upload``). Raises ``NotFound`` (missing
        parent without ``parents``), ``Conflict`` (a directory is at ``path``),
        ``InvalidRequest``."""
        parts = check_volume_path(path)
        if not parts:
            raise InvalidPath("cannot write to the volume's root directory")
        _check_owner(uid, gid, mode)
        with self._parent(parts, create=parents) as (pinned, name):
            # The upload outlives this block: keep a parent fd of its own.
            parent = os.dup(pinned)
        try:
            existing = _lstat(parent, name)
            if existing is not None and stat.S_ISDIR(existing.st_mode):
                raise Conflict(f"'{path[:200]}' is a directory")
            owner = os.fstat(parent)
            temp = _TEMP_PREFIX + secrets.token_hex(8)
            flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
            fd = os.open(temp, flags, 0o600, dir_fd=parent)
        except BaseException:
            os.close(parent)
            raise
        return Upload(
            self,
            "/" + "/".join(parts),
            parent,
            name,
            temp,
            fd,
            (
                owner.st_uid if uid is None else uid,
                owner.st_gid if gid is None else gid,
                0o644 if mode is None else mode,
            ),
        )

    def write(
        self,
        path: str,
        chunks: Iterable[bytes],
        *,
        uid: int | None,
        gid: int | None,
        mode: int | None,
        parents: bool,
    ) -> Entry:
        """Writes ``chunks`` as the file at ``path`` in one go (``start_upload``)."""
        upload = self.start_upload(path, uid=uid, gid=gid, mode=mode, parents=parents)
        try:
            for chunk in chunks:
                upload.write(chunk)
        except BaseException:
            upload.abort()
            raise
        return upload.commit()

    def update(self, path: str, *, uid: int | None, gid: int | None, mode: int | None) -> Entry:
        """Changes the owner and/or mode of the entry at ``path`` itself (a link's owner;
        a link has no mode of its own). Raises ``NotFound``, ``InvalidRequest``."""
        parts = check_volume_path(path)
        _check_owner(uid, gid, mode)
        with self._parent(parts) as (parent, name):
            fd = _open_child(parent, name, os.O_PATH, must_exist=True)
            assert fd is not None
            try:
                info = os.fstat(fd)
                if uid is not None or gid is not None:
                    _fchown_empty(fd, -1 if uid is None else uid, -1 if gid is None else gid)
                if mode is not None:
                    if stat.S_ISLNK(info.st_mode):
                        raise InvalidRequest(f"'{path[:200]}' is a link; a link has no mode")
                    # The O_PATH fd names this very inode; the magic link is not re-resolved
                    # by name, so a swapped entry cannot redirect it.
                    os.chmod(f"/proc/self/fd/{fd}", mode)
            finally:
                os.close(fd)
            return self._entry(parent, name, "/" + "/".join(parts))

    def remove(self, path: str) -> None:
        """Removes the entry at ``path`` (a directory with everything in it; a link, not what
        it points to). Raises ``NotFound``, ``InvalidRequest`` (the root)."""
        parts = check_volume_path(path)
        if not parts:
            raise InvalidPath("cannot remove the volume's root directory")
        with self._parent(parts) as (parent, name):
            info = _lstat(parent, name)
            if info is None:
                raise NotFound(f"'{path[:200]}' not found in the volume")
            if stat.S_ISDIR(info.st_mode):
                _remove_tree(parent, name)
            else:
                os.unlink(name, dir_fd=parent)

    # -- resolution -------------------------------------------------------------------------

    def _open(self, parts: list[str], flags: int) -> int:
        """An fd of ``parts`` resolved inside the volume (links included, as if it were
        ``/``). Raises ``NotFound`` and ``InvalidRequest``."""
        root = os.open(self.root, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
        try:
            return _openat2(root, "/".join(parts) or ".", flags | os.O_CLOEXEC)
        finally:
            os.close(root)

    @contextlib.contextmanager
    def _parent(self, parts: list[str], *, create: bool = False) -> Iterator[tuple[int, str]]:
        """The pinned parent directory of ``parts`` and the last name (the root: itself and
        ``"."``); with ``create``, missing parents are made (owned like their own parent)."""
        if not parts:
            fd = self._open([], os.O_PATH | os.O_DIRECTORY)
            try:
                yield fd, "."
            finally:
                os.close(fd)
            return
        if create:
            for depth in range(1, len(parts)):
                with self._parent(parts[:depth]) as (above, name):
                    _make_dir(above, name, None, None, 0o755)
        try:
            fd = self._open(parts[:-1], os.O_PATH | os.O_DIRECTORY)
        except NotFound:
            raise NotFound(f"'/{'/'.join(parts[:-1])}' not found in the volume") from None
        try:
            yield fd, parts[-1]
        finally:
            os.close(fd)

    def _entry(self, parent: int, name: str, path: str) -> Entry:
        info = _lstat(parent, name)
        if info is None:
            raise NotFound(f"'{path[:200]}' not found in the volume")
        target = None
        if stat.S_ISLNK(info.st_mode):
            kind = "symlink"
            target = os.readlink(name, dir_fd=parent)
        elif stat.S_ISDIR(info.st_mode):
            kind = "directory"
        elif stat.S_ISREG(info.st_mode):
            kind = "file"
        else:
            kind = "unknown"
        shown = "/" if path in ("", "/") else path
        return Entry(
            name=shown.rsplit("/", 1)[-1] or "/",
            type=kind,
            path=shown,
            size=info.st_size,
            mode=stat.S_IMODE(info.st_mode),
            uid=info.st_uid,
            gid=info.st_gid,
            atime=datetime.fromtimestamp(info.st_atime, UTC),
            mtime=datetime.fromtimestamp(info.st_mtime, UTC),
            ctime=datetime.fromtimestamp(info.st_ctime, UTC),
            target=target,
        )


class Upload:
    """A file being written: bytes go to a new file (``O_EXCL``, 0600) beside the target;
    ``commit`` sets its owner and mode on the fd, fsyncs and renames it over the target;
    ``abort`` (or any failure) removes it. Readers see the old file or the whole new one."""

    def __init__(
        self,
        files: VolumeFiles,
        path: str,
        parent: int,
        name: str,
        temp: str,
        fd: int,
        owner: tuple[int, int, int],
    ) -> None:
        self._files = files
        self._path = path
        self._parent = parent
        self._name = name
        self._temp = temp
        self._fd: int | None = fd
        self._owner = owner

    def write(self, data: bytes) -> None:
        """Appends ``data``; raises ``DiskFull`` (the upload is aborted then)."""
        if self._fd is None:
            raise InvalidRequest("this upload has ended")
        view = memoryview(data)
        try:
            while view:
                view = view[os.write(self._fd, view) :]
        except OSError as exc:
            self.abort()
            if exc.errno in (errno.ENOSPC, errno.EDQUOT):
                raise DiskFull(
                    f"the volume is full; '{self._path[:200]}' was not written (free space in "
                    "it, or use another volume)"
                ) from None
            raise

    def commit(self) -> Entry:
        if self._fd is None:
            raise InvalidRequest("this upload has ended")
        uid, gid, mode = self._owner
        try:
            os.fchown(self._fd, uid, gid)
            os.fchmod(self._fd, mode)
            os.fsync(self._fd)
            os.close(self._fd)
            self._fd = None
            os.rename(self._temp, self._name, src_dir_fd=self._parent, dst_dir_fd=self._parent)
            return self._files._entry(self._parent, self._name, self._path)
        except OSError as exc:
            self.abort()
            if exc.errno in (errno.ENOSPC, errno.EDQUOT):
                raise DiskFull(
                    f"the volume is full; '{self._path[:200]}' was not written"
                ) from None
            if exc.errno in (errno.EISDIR, errno.ENOTEMPTY):
                raise Conflict(f"'{self._path[:200]}' is a directory") from None
            raise
        finally:
            self._close_parent()

    def abort(self) -> None:
        """Removes what was written; idempotent."""
        if self._fd is not None:
            with contextlib.suppress(OSError):
                os.close(self._fd)
            self._fd = None
        if self._parent >= 0:
            _unlink_quietly(self._parent, self._temp)
        self._close_parent()

    def _close_parent(self) -> None:
        if self._parent >= 0:
            with contextlib.suppress(OSError):
                os.close(self._parent)
            self._parent = -1


def _openat2(dir_fd: int, path: str, flags: int) -> int:
    how = struct.pack("QQQ", flags, 0, _RESOLVE)
    for _ in range(_RETRIES):
        fd = _libc.syscall(_SYS_OPENAT2, dir_fd, path.encode(), how, len(how))
        if fd >= 0:
            return int(fd)
        error = ctypes.get_errno()
        if error == errno.EAGAIN:
            continue  # a rename raced the lookup; the kernel asks to retry
        if error in (errno.ENOENT, errno.ENOTDIR):
            raise NotFound(f"'/{path.lstrip('.')}' not found in the volume")
        if error == errno.ELOOP:
            raise InvalidRequest(f"'/{path}': too many levels of links")
        if error == errno.EXDEV:
            raise InvalidRequest(f"'/{path}' leads out of the volume")
        raise OSError(error, os.strerror(error), path)
    raise Conflict(f"'/{path}' kept changing while it was looked up; try again")


def _open_child(parent: int, name: str, flags: int, *, must_exist: bool = False) -> int | None:
    """``name`` in ``parent``, never following a link in its place (None: gone or a link)."""
    try:
        return os.open(name, flags | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=parent)
    except (FileNotFoundError, NotADirectoryError):
        if must_exist:
            raise NotFound(f"'{name}' not found in the volume") from None
        return None
    except OSError as exc:
        if exc.errno == errno.ELOOP and not must_exist:
            return None
        raise


def _walk(top: int, trail: list[str]) -> int | None:
    """An fd of the directory ``trail`` below ``top``, each step one name opened with
    ``O_NOFOLLOW`` (None if a step is gone or is no longer a directory). Re-walking from the
    top, rather than keeping an fd per level, bounds the fds a deep tree can cost to two."""
    fd = os.dup(top)
    for name in trail:
        try:
            step = os.open(
                name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=fd
            )
        except OSError as exc:
            os.close(fd)
            if exc.errno in (errno.ENOENT, errno.ENOTDIR, errno.ELOOP):
                return None
            raise
        os.close(fd)
        fd = step
    return fd


def _remove_tree(parent: int, name: str) -> None:
    """Removes the directory ``name`` in ``parent`` and everything in it, iteratively (no
    recursion limit) and without following a link anywhere: links are unlinked, never
    entered; every directory is opened ``O_NOFOLLOW`` by one name from the one above, and at
    most ``_FD_WINDOW`` of them are held at once (``_Trail``). A tree a sandbox keeps changing
    meanwhile ends in ``Conflict`` after ``_REMOVE_STEPS`` steps."""
    top = os.open(name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=parent)
    trail = _Trail(top)
    try:
        for _ in range(_REMOVE_STEPS):
            pending = [_empty_out(top)]
            while pending:
                if pending[-1]:
                    child = pending[-1].pop()
                    if trail.descend(child):
                        pending.append(_empty_out(trail.current()))
                    continue
                pending.pop()
                if pending:
                    last = trail.ascend()
                    try:
                        os.rmdir(last, dir_fd=trail.current())
                    except OSError as exc:
                        if exc.errno == errno.ENOTEMPTY:
                            pending[-1].append(last)  # refilled meanwhile: go again
                        elif exc.errno != errno.ENOENT:
                            raise
            try:
                os.rmdir(name, dir_fd=parent)
                return
            except OSError as exc:
                if exc.errno != errno.ENOTEMPTY:
                    raise
        raise Conflict("the directory kept changing while it was being removed; try again")
    finally:
        trail.close()


class _Trail:
    """The way from a pinned directory down to the current one: the names, and fds for the
    deepest ``_FD_WINDOW`` levels only (shallower ones are re-opened, name by name with
    ``O_NOFOLLOW``, from the top when the walk climbs back to them)."""

    def __init__(self, top: int) -> None:
        self._names: list[str] = []
        self._fds: list[int] = [top]  # one per level, top first; -1 where closed
        self._lowest = 1  # no level in 1.._lowest-1 holds an fd

    def current(self) -> int:
        level = len(self._names)
        if self._fds[level] < 0:
            # Levels below ``_lowest`` are all closed, and it is above ``level`` now.
            for depth in range(1, level + 1):
                if self._fds[depth] < 0:
                    self._fds[depth] = _open_dir(self._fds[depth - 1], self._names[depth - 1])
            self._lowest = 1
            self._trim()
        return self._fds[level]

    def descend(self, name: str) -> bool:
        """Enters ``name``; False (and stays) if it is gone or is no directory (a link)."""
        try:
            fd = _open_dir(self.current(), name)
        except OSError as exc:
            if exc.errno in (errno.ENOENT, errno.ENOTDIR, errno.ELOOP):
                return False
            raise
        self._names.append(name)
        self._fds.append(fd)
        self._trim()
        return True

    def ascend(self) -> str:
        """Leaves the current directory; returns its name."""
        fd = self._fds.pop()
        if fd >= 0:
            os.close(fd)
        self._lowest = min(self._lowest, len(self._fds))
        return self._names.pop()

    def close(self) -> None:
        for fd in self._fds:
            if fd >= 0:
                os.close(fd)
        self._fds = [-1]

    def _trim(self) -> None:
        """Closes the shallowest open levels until at most ``_FD_WINDOW`` are open."""
        deepest = len(self._fds) - 1
        while deepest - self._lowest + 1 > _FD_WINDOW:
            os.close(self._fds[self._lowest])
            self._fds[self._lowest] = -1
            self._lowest += 1


def _open_dir(dir_fd: int, name: str) -> int:
    return os.open(name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=dir_fd)


def _empty_out(dir_fd: int) -> list[str]:
    """Unlinks every entry of ``dir_fd`` that is not a directory (links included, never
    followed); returns the names of the subdirectories left."""
    below = []
    with os.scandir(dir_fd) as entries:
        for entry in entries:
            if entry.is_dir(follow_symlinks=False):
                below.append(entry.name)
                continue
            with contextlib.suppress(FileNotFoundError):
                os.unlink(entry.name, dir_fd=dir_fd)
    return below


def _lstat(parent: int, name: str) -> os.stat_result | None:
    try:
        return os.stat(name, dir_fd=parent, follow_symlinks=False)
    except FileNotFoundError:
        return None


def _make_dir(parent: int, name: str, uid: int | None, gid: int | None, mode: int) -> bool:
    """Makes ``name`` in ``parent`` unless something is there; returns whether it did. The
    new directory is owned by ``uid``/``gid`` or else by the parent's owner."""
    try:
        os.mkdir(name, 0o700, dir_fd=parent)
    except FileExistsError:
        return False
    owner = os.fstat(parent)
    fd = os.open(name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=parent)
    try:
        os.fchown(fd, owner.st_uid if uid is None else uid, owner.st_gid if gid is None else gid)
        os.fchmod(fd, mode)
    finally:
        os.close(fd)
    return True


def _fchown_empty(fd: int, uid: int, gid: int) -> None:
    if _libc.fchownat(fd, b"", uid, gid, _AT_EMPTY_PATH) != 0:
        error = ctypes.get_errno()
        raise OSError(error, os.strerror(error))


def _unlink_quietly(parent: int, name: str) -> None:
    with contextlib.suppress(OSError):
        os.unlink(name, dir_fd=parent)


def _check_owner(uid: int | None, gid: int | None, mode: int | None) -> None:
    for label, value in (("uid", uid), ("gid", gid)):
        if value is not None and not 0 <= value <= MAX_ID:
            raise InvalidRequest(f"{label} must be between 0 and {MAX_ID} (a sandbox's ids)")
    if mode is not None and not 0 <= mode <= 0o7777:
        raise InvalidRequest("mode must be a permission mode between 0 and 0o7777")
