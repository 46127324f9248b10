"""Replace a small file whole: readers see the old content or the new, never a mix.

Records the gateway keeps on disk (approvals, state files, build metadata, snapshot indexes,
files published into a sandbox's directory) are rewritten while other processes read them
and while the machine may crash. Each used to spell out "temp file, fsync, rename" with its
own temp naming; a fixed temp name let two writers of one path trip over each other, and some
forgot the fsync. This is the one way to do it.
"""

from __future__ import annotations

import contextlib
import os
import secrets
from pathlib import Path

__all__ = ["write_all", "write_atomic"]


def write_atomic(path: Path, data: bytes | str, *, mode: int = 0o600, durable: bool = True) -> None:
    """Makes ``path`` hold ``data`` with permissions ``mode`` (the umask does not narrow them).

    The temp file beside it has a name of its own, so concurrent writers of one path each
    finish (the last rename wins) instead of renaming each other's half-written file; it is
    created exclusively and never through a symlink. ``durable`` fsyncs the file before the
    rename and the directory after it, so a crash leaves the old record or the new one; leave
    it off only for files nothing needs after a crash.
    """
    payload = data.encode() if isinstance(data, str) else data
    temp = path.with_name(f".{path.name}.{secrets.token_hex(6)}.tmp")
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
    fd = os.open(temp, flags, mode)
    try:
        try:
            write_all(fd, payload)
            os.fchmod(fd, mode)
            if durable:
                os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(temp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            temp.unlink()
        raise
    if durable:
        _sync_directory(path.parent)


def write_all(fd: int, data: bytes) -> None:
    """Writes all of ``data`` to ``fd``: ``os.write`` may write less than it was given."""
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def _sync_directory(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
