"""Writing a file into a sandbox's own directory (``/run/sandgate`` inside), safely.

SECURITY: code inside the sandbox may be able to create entries in that directory (on Docker
the guest's root can), so it could plant a symlink where the gateway, running as root, is
about to write. The file is therefore written under a fresh random name with
``O_CREAT | O_EXCL | O_NOFOLLOW`` (which never follows or reuses anything already there) and
renamed into place; a rename replaces a planted link itself, never its target (FILE-04).
"""

from __future__ import annotations

import os
from pathlib import Path

from sandgate._atomic import write_atomic

__all__ = ["STAGING", "make_host_dir", "publish_file", "staging_dir"]

#: The entry of ``$SANDGATE_HOME/sandboxes`` that is no sandbox's: where hooks build trees.
STAGING = ".staging"


def make_host_dir(path: Path, *, exist_ok: bool = False) -> None:
    """Creates a sandbox's host directory, mode 0755 whatever the gateway's umask.

    Why the explicit mode: inside, the sandbox's root is no host user, so it reads the
    directory (its guest's code and configuration) through the "other" bits; a narrower
    umask would leave a sandbox whose guest cannot start.
    """
    path.mkdir(parents=True, mode=0o755, exist_ok=exist_ok)
    os.chmod(path, 0o755)  # noqa: S103 - see the docstring


def staging_dir(home: Path, name: str) -> Path:
    """Where a hook builds a tree before one ``rename`` moves it into a sandbox's host
    directory (tool stubs, skills): beside the host directories, on their file system (a
    tmpfs of its own, ``runtime.tmpfs``; a rename cannot cross file systems), never inside a
    sandbox's own directory."""
    return home / "sandboxes" / STAGING / name


def publish_file(directory: Path, name: str, data: bytes, mode: int = 0o644) -> None:
    """Atomically makes ``directory/name`` hold ``data`` (readable by the sandbox's users)."""
    # Not durable: the directory is rebuilt for every start, so a crash needs none of it.
    write_atomic(directory / name, data, mode=mode, durable=False)
