"""A devpts instance of its own, with a cap, for each sandbox (RES-14).

Why: every container's ``/dev/pts`` draws on one kernel-wide pool (``kernel.pty.max``, 4096 by
default, a quarter reserved for the host). Without a cap one sandbox opening ``/dev/ptmx``
a few thousand times leaves its neighbours unable to start a terminal. The runtimes mount
``devpts -o newinstance,max=N`` on the host and bind it over the sandbox's ``/dev/pts``; its
``/dev/ptmx`` is the usual link to ``pts/ptmx``.

Trust: the mount point is the runtime's (under the gateway's home), never the sandbox's; the
sandbox sees only the instance itself.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
from pathlib import Path

from sandgate.errors import RuntimeUnavailable

__all__ = ["mount_devpts", "unmount_devpts"]

#: The ``tty`` group of Debian images, owner group of every pty slave.
TTY_GID = 5


def mount_devpts(path: Path, max_ptys: int, *, gid: int = TTY_GID) -> None:
    """Mounts a fresh devpts instance at ``path`` (created); idempotent."""
    path.mkdir(parents=True, exist_ok=True, mode=0o755)
    if os.path.ismount(path):
        return
    mount = shutil.which("mount")
    if mount is None:
        raise RuntimeUnavailable("per-sandbox devpts needs mount(8): apt-get install mount")
    options = f"newinstance,max={max_ptys},ptmxmode=0666,mode=0620,gid={gid}"
    result = subprocess.run(
        [mount, "-t", "devpts", "-o", options, "devpts", str(path)],
        capture_output=True,
        text=True,
        check=False,
    )
    if result.returncode != 0:
        raise RuntimeUnavailable(
            f"cannot mount the sandbox's devpts at {path}: {result.stderr.strip()[:300]}; "
            "the runtime must run as root"
        )


def unmount_devpts(path: Path) -> None:
    """Unmounts and removes ``path``; idempotent, never raises."""
    if os.path.ismount(path):
        subprocess.run(["umount", "--lazy", str(path)], capture_output=True, check=False)
    with contextlib.suppress(OSError):
        path.rmdir()
