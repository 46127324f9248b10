"""Per-install keys: random bytes in a file under the gateway's home, made once.

Trust: a key file is readable by root only (0600, in a 0700 directory); whoever reads it can
decrypt or forge what it protects, so it never leaves the gateway (not in a sandbox, a log or
an API answer). Losing it loses what it protects: back it up with the store.
"""

from __future__ import annotations

import os
import secrets
from collections.abc import Callable
from pathlib import Path

__all__ = ["install_file", "install_key"]


def install_key(path: Path, size: int = 32) -> bytes:
    """The key at ``path``: ``size`` random bytes, created on first use (``install_file``).
    Raises ``OSError``."""
    return install_file(path, lambda: secrets.token_bytes(size))


def install_file(path: Path, make: Callable[[], bytes]) -> bytes:
    """The file at ``path``, created from ``make()`` on first use: 0600 in a 0700 directory,
    fsynced with its directory, atomically (the first creator wins and a concurrent one reads
    the winner's content). Raises ``OSError``."""
    try:
        return path.read_bytes()
    except FileNotFoundError:
        pass
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    temp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as file:
        file.write(make())
        file.flush()
        os.fsync(file.fileno())
    try:
        os.link(temp, path)
    except FileExistsError:
        pass
    finally:
        temp.unlink()
    directory = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(directory)
    finally:
        os.close(directory)
    return path.read_bytes()
