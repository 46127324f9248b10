"""Writing a file into a sandbox's own directory (``/run/sandgate`` inside), safely.

SECURITY: code inside the sandbox may be able to create entries in that directory (on Docker
the guest's root can), so it could plant a symlink where the gateway, running as root, is
about to write. The file is therefore written under a fresh random name with
``O_CREAT | O_EXCL | O_NOFOLLOW`` (which never follows or reuses anything already there) and
renamed into place; a rename replaces a planted link itself, never its target (FILE-04).
"""

from __future__ import annotations

import os
import secrets
from pathlib import Path

__all__ = ["publish_file"]


def publish_file(directory: Path, name: str, data: bytes, mode: int = 0o644) -> None:
    """Atomically makes ``directory/name`` hold ``data`` (readable by the sandbox's users)."""
    temp = directory / f".{name}.{secrets.token_hex(8)}.tmp"
    fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, mode)
    try:
        with os.fdopen(fd, "wb") as file:
            file.write(data)
        os.chmod(temp, mode, follow_symlinks=False)  # umask may have narrowed it
        os.replace(temp, directory / name)
    except BaseException:
        temp.unlink(missing_ok=True)
        raise
