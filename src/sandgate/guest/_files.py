"""File operations, run by the per-user worker *as that user* on the client's connection.

Trust: the request comes from the gateway (trusted); the file system content is the sandbox's
(untrusted: any path may be a symlink, FIFO or device placed by sandbox code). Enforced here:
the kernel checks every access against the worker's uid/gids (the worker never holds more
privilege than the selected user); reads refuse anything but regular files and never block on
a FIFO; files the kernel generates (``/proc``, ``/sys``) are read as the user sees them,
bounded (``_kernelfiles``); writes never leave a half-written target. Not done here: quotas
(the runtime's disk limits), path confinement (absolute paths name the sandbox's own files,
as in E2B).
"""

from __future__ import annotations

import contextlib
import errno
import os
import socket
import stat
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import IO, Any

from ._config import GuestConfig
from ._dirs import make_dirs
from ._entry import METADATA_PREFIX, entry_info
from ._errors import OpError, from_oserror
from ._kernelfiles import has_no_fixed_size, read_unsized
from ._users import User, resolve_path
from ._wire import FrameError, recv_frame, send_frame, send_json
from .protocol import DISK_FULL, FILE_CHUNK, MAX_FRAME, Kind, decode_json

__all__ = ["FILE_OPS", "FileContext", "TempFlags", "is_temp_name", "temp_flags"]

#: A write's temp file is ``.<name>.<random>.sgtmp-<flags>`` beside its target; the watcher
#: hides it and reports the rename that publishes it from its flags (``TempFlags``).
_TEMP_MARK = ".sgtmp-"
_LIST_BATCH = 2000


@dataclass(frozen=True)
class TempFlags:
    """What a write's temp file stands for, carried in its name so that a watcher (another
    process) can report its publication as the writer's in-place write would have shown."""

    #: The target did not exist (``c``) or is replaced (``w``).
    created: bool
    #: The write sets or clears the target's ``user.e2b.*`` metadata (``m``).
    metadata: bool = False
    #: No byte was written (``e``; given by a rename once the data is in).
    empty: bool = False

    def suffix(self) -> str:
        return (
            _TEMP_MARK
            + ("c" if self.created else "w")
            + ("m" if self.metadata else "")
            + ("e" if self.empty else "")
        )


def temp_flags(name: str) -> TempFlags | None:
    """The flags of a write's temp file name (a path or a base name); None for any other."""
    base = name.rsplit("/", 1)[-1]
    if not base.startswith("."):
        return None
    head, mark, tail = base.rpartition(_TEMP_MARK)
    if not mark or not head or not tail or tail[0] not in "cw" or not set(tail[1:]) <= {"m", "e"}:
        return None
    return TempFlags(tail[0] == "c", "m" in tail, "e" in tail)


def is_temp_name(name: str) -> bool:
    return temp_flags(name) is not None


def _has_metadata(path: str) -> bool:
    try:
        return any(name.startswith(METADATA_PREFIX) for name in os.listxattr(path))
    except OSError:
        return False


@dataclass(frozen=True)
class FileContext:
    user: User
    config: GuestConfig

    def path(self, request: dict[str, Any], key: str = "path") -> str:
        value = request.get(key, "")
        if value is None:
            value = ""
        if not isinstance(value, str):
            raise OpError("invalid_argument", f"{key} must be a string")
        return resolve_path(value, self.user, self.config.default_workdir)


def _entry(path: str) -> dict[str, Any]:
    try:
        return entry_info(path)
    except OSError as exc:
        raise from_oserror(exc, f"stat {path}") from None


def _int_field(request: dict[str, Any], key: str, default: int | None) -> int | None:
    value = request.get(key, default)
    if value is None:
        return None
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise OpError("invalid_argument", f"{key} must be a non-negative integer")
    return value


def op_stat(sock: socket.socket, request: dict[str, Any], ctx: FileContext) -> None:
    send_json(sock, {"ok": True, "entry": _entry(ctx.path(request))})


def op_make_dir(sock: socket.socket, request: dict[str, Any], ctx: FileContext) -> None:
    path = ctx.path(request)
    try:
        make_dirs(path, ctx.user, exist_ok=False)
    except FileExistsError:
        if os.path.isdir(path):
            raise OpError("already_exists", f"directory already exists: {path}") from None
        raise OpError("invalid_argument", f"path exists but is not a directory: {path}") from None
    except OSError as exc:
        raise from_oserror(exc, f"make directory {path}") from None
    send_json(sock, {"ok": True, "entry": _entry(path)})


def op_move(sock: socket.socket, request: dict[str, Any], ctx: FileContext) -> None:
    source = ctx.path(request, "source")
    destination = ctx.path(request, "destination")
    if not os.path.lexists(source):
        raise OpError("not_found", f"source does not exist: {source}")
    try:
        make_dirs(os.path.dirname(destination), ctx.user, exist_ok=True)
        try:
            os.rename(source, destination)
        except OSError as exc:
            if exc.errno != errno.EXDEV:
                raise
            import shutil  # rarely needed: not paid by every guest's start-up

            shutil.move(source, destination)
    except OSError as exc:
        raise from_oserror(exc, f"move {source} to {destination}") from None
    send_json(sock, {"ok": True, "entry": _entry(destination)})


def op_remove(sock: socket.socket, request: dict[str, Any], ctx: FileContext) -> None:
    path = ctx.path(request)
    try:
        st = os.lstat(path)
        if stat.S_ISDIR(st.st_mode):
            import shutil  # rarely needed: not paid by every guest's start-up

            shutil.rmtree(path)
        else:
            os.unlink(path)
    except FileNotFoundError:
        pass
    except OSError as exc:
        raise from_oserror(exc, f"remove {path}") from None
    send_json(sock, {"ok": True})


def _walk(path: str, depth: int, level: int = 1) -> Iterator[dict[str, Any]]:
    try:
        names = sorted(os.listdir(path))
    except OSError:
        return
    for name in names:
        child = os.path.join(path, name)
        try:
            entry = entry_info(child)
        except OSError:
            continue
        yield entry
        if level < depth and entry["type"] == "dir" and entry["symlink_target"] is None:
            yield from _walk(child, depth, level + 1)


def op_list_dir(sock: socket.socket, request: dict[str, Any], ctx: FileContext) -> None:
    path = ctx.path(request)
    depth = _int_field(request, "depth", 1) or 1
    try:
        st = os.stat(path)
    except OSError as exc:
        raise from_oserror(exc, f"stat {path}") from None
    if not stat.S_ISDIR(st.st_mode):
        raise OpError("invalid_argument", f"path is not a directory: {path}")
    if not os.access(path, os.R_OK | os.X_OK):
        raise OpError("permission_denied", f"cannot list directory {path}")
    batch: list[dict[str, Any]] = []
    size = 0
    for entry in _walk(path, depth):
        batch.append(entry)
        size += (
            300
            + len(entry["path"]) * 2
            + sum(len(k) + len(v) for k, v in entry["metadata"].items())
        )
        if len(batch) >= _LIST_BATCH or size > MAX_FRAME // 2:
            send_json(sock, {"ok": True, "entries": batch, "more": True})
            batch, size = [], 0
    send_json(sock, {"ok": True, "entries": batch, "more": False})


def _open_regular(path: str) -> tuple[int, os.stat_result]:
    """Opens a regular file for reading without ever blocking on a FIFO or touching a device."""
    try:
        st = os.stat(path)
    except OSError as exc:
        raise from_oserror(exc, f"open {path}") from None
    _require_regular(st, path)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC)
    except OSError as exc:
        raise from_oserror(exc, f"open {path}") from None
    try:
        # SECURITY: re-check on the open fd, the path may have been swapped since the stat.
        st = os.fstat(fd)
        _require_regular(st, path)
    except BaseException:
        os.close(fd)
        raise
    return fd, st


def _require_regular(st: os.stat_result, path: str) -> None:
    if stat.S_ISDIR(st.st_mode):
        raise OpError("invalid_argument", f"path is a directory: {path}")
    if not stat.S_ISREG(st.st_mode):
        raise OpError("invalid_argument", f"not a regular file: {path}")


def op_read_file(sock: socket.socket, request: dict[str, Any], ctx: FileContext) -> None:
    path = ctx.path(request)
    offset = _int_field(request, "offset", 0) or 0
    length = _int_field(request, "length", None)
    fd, st = _open_regular(path)
    try:
        if has_no_fixed_size(fd, st):
            _send_unsized(sock, read_unsized(fd, path), path, offset, length)
            return
        start = min(offset, st.st_size)
        remaining = st.st_size - start if length is None else min(length, st.st_size - start)
        _send_header(sock, st.st_size, path, start, remaining)
        position = start
        while remaining > 0:
            try:
                chunk = os.pread(fd, min(FILE_CHUNK, remaining), position)
            except OSError:
                break
            if not chunk:
                break
            send_frame(sock, Kind.DATA, chunk)
            position += len(chunk)
            remaining -= len(chunk)
        send_frame(sock, Kind.EOF)
    finally:
        os.close(fd)


def _send_header(sock: socket.socket, size: int, path: str, offset: int, length: int) -> None:
    send_json(
        sock,
        {
            "ok": True,
            "size": size,
            "name": os.path.basename(path),
            "offset": offset,
            "length": length,
        },
    )


def _send_unsized(
    sock: socket.socket, data: bytes, path: str, offset: int, length: int | None
) -> None:
    """A file read to its end (``_kernelfiles``): the requested range of what was read."""
    start = min(offset, len(data))
    end = len(data) if length is None else min(len(data), start + length)
    _send_header(sock, len(data), path, start, end - start)
    view = memoryview(data)
    for position in range(start, end, FILE_CHUNK):
        send_frame(sock, Kind.DATA, bytes(view[position : min(end, position + FILE_CHUNK)]))
    send_frame(sock, Kind.EOF)


def _metadata(request: dict[str, Any]) -> dict[str, str]:
    metadata = request.get("metadata") or {}
    if not isinstance(metadata, dict) or not all(
        isinstance(k, str) and k and isinstance(v, str) for k, v in metadata.items()
    ):
        raise OpError("invalid_argument", "metadata must map non-empty strings to strings")
    return metadata


def _apply_metadata(fd: int, metadata: dict[str, str], clear: bool) -> None:
    """Makes ``metadata`` the file's whole ``user.e2b.*`` set."""
    try:
        if clear:
            for name in os.listxattr(fd):
                if name.startswith(METADATA_PREFIX):
                    os.removexattr(fd, name)
        for key, value in metadata.items():
            os.setxattr(fd, METADATA_PREFIX + key, value.encode())
    except OSError as exc:
        if exc.errno in (errno.ENOTSUP, errno.EOPNOTSUPP):
            if metadata:
                raise OpError(
                    "failed_precondition", "the file system does not support file metadata"
                ) from None
            return
        raise from_oserror(exc, "set metadata") from None


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def _receive_into(sock: socket.socket, fd: int) -> bool:
    """Copies the client's DATA frames into ``fd``; ``False`` if the client left before EOF."""
    while True:
        try:
            frame = recv_frame(sock)
        except (FrameError, OSError):
            return False
        if frame is None:
            return False
        kind, payload = frame
        if kind == Kind.EOF:
            return True
        if kind != Kind.DATA:
            return False
        try:
            _write_all(fd, payload)
        except OSError as exc:
            if exc.errno == errno.ENOMEM:
                # A file system in memory (tmpfs) could not get a page for the data: for
                # the writer that is a full disk, whatever backs it.
                raise OpError(
                    "resource_exhausted",
                    "write: not enough space in the sandbox (its files are held in memory)",
                    DISK_FULL,
                ) from None
            raise from_oserror(exc, "write") from None


def _receive_json(sock: socket.socket) -> dict[str, Any] | None:
    """The client's next JSON frame; ``None`` if it left or broke the protocol."""
    try:
        frame = recv_frame(sock)
    except (FrameError, OSError):
        return None
    if frame is None or frame[0] != Kind.JSON:
        return None
    try:
        return decode_json(frame[1])
    except ValueError:
        return None


class _Staged:
    """One received file waiting for its commit. Normally a temp file beside the target,
    renamed over it; when the directory is not writable but the file is, an unnamed staging
    file (in the sandbox's temp directory) copied into the target at the commit. Either way
    the target is untouched until :meth:`commit`, and :meth:`discard` leaves nothing behind.
    Only the in-place copy can fail half-way (a disk that fills while copying); there is no
    other way to write a file whose directory the user may not write.
    """

    def __init__(
        self,
        path: str,
        target: str,
        metadata: dict[str, str],
        *,
        temp: str | None = None,
        staging: IO[bytes] | None = None,
    ) -> None:
        self.path = path
        self._target = target
        self._metadata = metadata
        self._temp = temp
        self._staging = staging

    def mark_empty(self) -> None:
        """Records in the temp file's name that nothing was written to it."""
        if self._temp is None:
            return
        flags = temp_flags(self._temp)
        if flags is None or flags.empty:
            return
        empty = (
            self._temp[: -len(flags.suffix())]
            + TempFlags(flags.created, flags.metadata, empty=True).suffix()
        )
        os.rename(self._temp, empty)
        self._temp = empty

    def commit(self) -> dict[str, Any]:
        """Puts the file in place and returns its entry."""
        if self._temp is not None:
            try:
                os.rename(self._temp, self._target)
            except OSError as exc:
                raise from_oserror(exc, f"write {self.path}") from None
            self._temp = None
        elif self._staging is not None:
            self._copy_in(self._staging)
        return _entry(self.path)

    def _copy_in(self, staging: IO[bytes]) -> None:
        try:
            fd = os.open(self._target, os.O_WRONLY | os.O_TRUNC | os.O_CLOEXEC | os.O_NOCTTY)
        except OSError as exc:
            raise from_oserror(exc, f"open {self.path}") from None
        try:
            staging.seek(0)
            while chunk := staging.read(FILE_CHUNK):
                _write_all(fd, chunk)
            _apply_metadata(fd, self._metadata, clear=True)
        except OSError as exc:
            raise from_oserror(exc, f"write {self.path}") from None
        finally:
            os.close(fd)

    def discard(self) -> None:
        """Removes what was staged and not committed; idempotent."""
        if self._temp is not None:
            with contextlib.suppress(OSError):
                os.unlink(self._temp)
            self._temp = None
        if self._staging is not None:
            self._staging.close()
            self._staging = None


def _stage(sock: socket.socket, path: str, metadata: dict[str, str], user: User) -> _Staged | None:
    """Receives one file (DATA frames up to EOF) into staging; ``None`` if the client left
    first. Raises :class:`OpError` (with nothing left behind) when the file cannot be written.
    """
    # Writes go through symlinks, as an O_TRUNC open would; the kernel checks each hop as
    # the user.
    target = os.path.realpath(path)
    try:
        existing: os.stat_result | None = os.stat(target)
    except FileNotFoundError:
        existing = None
    except OSError as exc:
        raise from_oserror(exc, f"stat {path}") from None
    if existing is not None and stat.S_ISDIR(existing.st_mode):
        raise OpError("invalid_argument", f"path is a directory: {path}")
    if existing is not None and not stat.S_ISREG(existing.st_mode):
        raise OpError("invalid_argument", f"not a regular file: {path}")
    parent, base = os.path.split(target)
    try:
        make_dirs(parent, user, exist_ok=True)
    except FileExistsError:
        raise OpError("invalid_argument", f"parent is not a directory: {parent}") from None
    except OSError as exc:
        raise from_oserror(exc, f"make directory {parent}") from None
    kind = TempFlags(
        created=existing is None,
        metadata=bool(metadata) or (existing is not None and _has_metadata(target)),
    )
    temp = os.path.join(parent, f".{base[:200]}.{os.urandom(6).hex()}{kind.suffix()}")
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC | os.O_NOFOLLOW
    try:
        fd = os.open(temp, flags, 0o666)
    except PermissionError:
        if existing is None:
            raise OpError("permission_denied", f"cannot create {path}") from None
        # The directory is not writable but the file may be: stage the upload elsewhere and
        # copy it in at the commit, so the target is still untouched if the client leaves.
        return _stage_in_place(sock, target, path, metadata)
    except OSError as exc:
        raise from_oserror(exc, f"create {path}") from None
    staged = _Staged(path, target, metadata, temp=temp)
    try:
        if not _receive_into(sock, fd):
            staged.discard()
            return None
        if existing is not None:
            os.fchmod(fd, stat.S_IMODE(existing.st_mode))
            if os.geteuid() == 0:
                os.fchown(fd, existing.st_uid, existing.st_gid)
        elif os.fstat(fd).st_size == 0:
            staged.mark_empty()
        _apply_metadata(fd, metadata, clear=False)
    except OSError as exc:
        staged.discard()
        raise from_oserror(exc, f"write {path}") from None
    except BaseException:
        staged.discard()
        raise
    finally:
        os.close(fd)
    return staged


def _stage_in_place(
    sock: socket.socket, target: str, path: str, metadata: dict[str, str]
) -> _Staged | None:
    if not os.access(target, os.W_OK):
        raise OpError("permission_denied", f"cannot write {path}")
    import tempfile  # rarely needed: not paid by every guest's start-up

    staging = tempfile.TemporaryFile()  # noqa: SIM115 (owned by the _Staged, which closes it)
    staged = _Staged(path, target, metadata, staging=staging)
    try:
        received = _receive_into(sock, staging.fileno())
    except BaseException:
        staged.discard()
        raise
    if not received:
        staged.discard()
        return None
    return staged


def op_write_file(sock: socket.socket, request: dict[str, Any], ctx: FileContext) -> None:
    staged = _stage(sock, ctx.path(request), _metadata(request), ctx.user)
    if staged is None:
        return
    try:
        entry = staged.commit()
    finally:
        staged.discard()
    send_json(sock, {"ok": True, "entry": entry})


def op_write_files(sock: socket.socket, request: dict[str, Any], ctx: FileContext) -> None:
    """Several files, committed together once all of them were received (protocol.py).

    A failure while receiving removes every staged file: no target changes. The commit
    renames in order; if one rename fails (the target turned into a directory meanwhile),
    the files before it are in place, the rest are removed, and the error says which.
    """
    metadata = _metadata(request)
    staged: list[_Staged] = []
    try:
        while True:
            message = _receive_json(sock)
            if message is None:
                return
            if message.get("commit") is True:
                entries = [file.commit() for file in staged]
                break
            received = _stage(sock, ctx.path(message), metadata, ctx.user)
            if received is None:
                return
            staged.append(received)
    finally:
        for file in staged:
            file.discard()
    send_json(sock, {"ok": True, "entries": entries})


def _op_watch(sock: socket.socket, request: dict[str, Any], ctx: FileContext) -> None:
    from ._inotify import watch

    watch(sock, ctx.path(request), bool(request.get("recursive", False)))


FILE_OPS: dict[str, Callable[[socket.socket, dict[str, Any], FileContext], None]] = {
    "stat": op_stat,
    "list_dir": op_list_dir,
    "make_dir": op_make_dir,
    "move": op_move,
    "remove": op_remove,
    "read_file": op_read_file,
    "write_file": op_write_file,
    "write_files": op_write_files,
    "watch": _op_watch,
}
