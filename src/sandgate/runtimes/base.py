"""The ``Runtime`` protocol: the one seam between Sandgate and whatever isolates a sandbox.

A runtime starts a sandbox from a template image with the sandbox's host directory mounted at
``/run/sandgate`` and the guest daemon as its command, and can find its sandboxes again after a
gateway restart (:meth:`Runtime.list`). Runtime handles are labels and ids, never memory.
Services depend on this protocol only, never on Docker.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path
from typing import Protocol

GUEST_DIR_IN_SANDBOX = "/run/sandgate"
_MIB = 1024 * 1024
#: Sizes of the small in-memory file systems every sandbox has (``/dev/shm``, ``/root``).
SHM_MB = 64
ROOT_HOME_MB = 16
#: Inodes per MiB of an in-memory file system: one per 16 KiB, ext4's default ratio.
INODES_PER_MB = 64
#: Kernel memory budgeted per tmpfs inode (inode and dentry), charged to the sandbox.
_INODE_BYTES = 1024
#: ``oom_score_adj`` of a sandbox's guest daemon; everything it starts gets ``PROCESS_OOM``.
#: Both are above the host's processes (0), and a sandbox that runs out of memory loses the
#: biggest of its own processes, not the guest that serves it.
GUEST_OOM_SCORE_ADJ = 500

#: The sandbox's first process, on every runtime (``python3 -I -S -c``; argv: the zipapp, then
#: the guest's own options). Start-up is most of a cold create, so: no shell in front, no
#: ``runpy``; -S skips ``site`` and the image's ``.pth`` files; ``ssl`` is blocked because
#: asyncio imports it (loading libssl/libcrypto, ~10 ms and several MiB) while the guest never
#: speaks TLS (it relays bytes; TLS is the gateway's business). asyncio supports Pythons
#: without ``ssl``; guest code that imports it fails loudly.
GUEST_BOOT = (
    "import sys\n"
    "sys.modules['ssl'] = None\n"
    "sys.path.insert(0, sys.argv.pop(1))\n"
    "from sandgate.guest.daemon import main\n"
    "main()\n"
)


class RuntimeState(Enum):
    """What the runtime reports about a sandbox it manages."""

    RUNNING = "running"
    PAUSED = "paused"
    #: Stopped, crashed or being removed: the sandbox is of no further use.
    GONE = "gone"


@dataclass(frozen=True)
class SandboxSpec:
    """Everything a runtime needs to start one sandbox."""

    sandbox_id: str
    image_ref: str
    host_dir: Path
    cpu_count: int
    memory_mb: int
    disk_size_mb: int
    pids_limit: int
    tmp_size_mb: int
    nofile: int
    home_dir: str = "/home/user"
    home_uid: int = 1000
    #: Pseudo-terminals the sandbox may hold at once (its own devpts instance).
    max_ptys: int = 64
    labels: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class RuntimeSandbox:
    sandbox_id: str
    ref: str
    state: RuntimeState


class Runtime(Protocol):
    """A sandbox backend. Every method raises ``RuntimeUnavailable`` when the backend cannot
    be reached, and nothing else for infrastructure failures."""

    name: str

    async def ping(self) -> str:
        """Returns a version string; raises ``RuntimeUnavailable`` with the fix."""
        ...

    async def create(self, spec: SandboxSpec) -> str:
        """Creates and starts the sandbox; returns the runtime's reference to it. On failure
        nothing is left behind."""
        ...

    async def kill(self, sandbox_id: str) -> None:
        """Stops the sandbox and removes everything the runtime made for it; idempotent."""
        ...

    async def pause(self, sandbox_id: str) -> None:
        """Freezes every process of the sandbox (memory kept)."""
        ...

    async def resume(self, sandbox_id: str) -> None:
        """Thaws a paused sandbox."""
        ...

    async def list(self) -> list[RuntimeSandbox]:
        """All sandboxes this Sandgate instance owns, in any state."""
        ...

    async def pid(self, sandbox_id: str) -> int | None:
        """The host PID of the sandbox's init process, for posture checks and metrics."""
        ...


def inode_limit(size_mb: int) -> int:
    """``nr_inodes`` for an in-memory file system of ``size_mb`` MiB."""
    return max(size_mb * INODES_PER_MB, 4096)


def memory_limit_bytes(spec: SandboxSpec) -> int:
    """The sandbox's cgroup memory limit (swap included, i.e. none): what its processes may
    use (``memory_mb``) plus its in-memory file systems at their full size, inodes included.

    Why: a sandbox's files live in RAM (tmpfs) and are charged to its cgroup. Counted inside
    ``memory_mb``, a download bigger than the memory limit would make the kernel OOM-kill
    processes until the guest itself goes, leaving a sandbox nobody can reach. With the file
    systems budgeted on top, a full disk answers ENOSPC and the processes keep ``memory_mb``.
    """
    filesystems_mb = spec.disk_size_mb + spec.tmp_size_mb + SHM_MB + ROOT_HOME_MB
    inodes = inode_limit(spec.disk_size_mb) + inode_limit(spec.tmp_size_mb)
    return (spec.memory_mb + filesystems_mb) * _MIB + inodes * _INODE_BYTES


def guest_command() -> list[str]:
    """The argv that starts the guest daemon inside a sandbox."""
    guest = GUEST_DIR_IN_SANDBOX
    return [
        "python3", "-I", "-S", "-c", GUEST_BOOT, f"{guest}/guest.pyz",
        "--socket", f"{guest}/guest.sock",
        "--config", f"{guest}/guest.json",
    ]  # fmt: skip
