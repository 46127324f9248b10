"""The ``Runtime`` protocol: the one seam between Sandgate and whatever isolates a sandbox.

A runtime starts a sandbox from a template image with the sandbox's host directory mounted at
``/run/sandgate`` and the guest daemon as its command, and can find its sandboxes again after a
gateway restart (:meth:`Runtime.list`). Runtime handles are labels and ids, never memory.
Services depend on this protocol only, never on Docker.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path
from typing import Protocol

from sandgate.runtimes._stage import GUEST_ARCHIVE, Seed, inode_limit
from sandgate.runtimes._stats import SandboxStats

__all__ = [
    "GUEST_ARCHIVE",
    "GUEST_BOOT",
    "GUEST_CAPABILITIES",
    "GUEST_DIR_IN_SANDBOX",
    "GUEST_LISTEN_FD",
    "GUEST_OOM_SCORE_ADJ",
    "GUEST_SOCKET",
    "SHM_MB",
    "SUDO_SHIM",
    "Runtime",
    "RuntimeSandbox",
    "RuntimeState",
    "SandboxSpec",
    "SandboxStats",
    "VolumeMount",
    "guest_command",
    "inode_limit",
    "memory_limit_bytes",
    "sandbox_seeds",
]

GUEST_DIR_IN_SANDBOX = "/run/sandgate"
#: The guest's listening socket, created on the host (never by the sandbox): the gateway
#: connects to ``<host dir>/guest.sock``; the guest receives the listening fd at start.
GUEST_SOCKET = "guest.sock"
#: The fd number the guest finds its listening socket on.
GUEST_LISTEN_FD = 3
_MIB = 1024 * 1024
#: Size of every sandbox's ``/dev/shm``.
SHM_MB = 64
#: Kernel memory budgeted per tmpfs inode (inode and dentry), charged to the sandbox.
_INODE_BYTES = 1024

#: SECURITY: the complete capability set of a sandbox's guest, on every runtime, all of them
#: relative to the sandbox's own user namespace (its root is an unprivileged host uid that owns
#: nothing outside the sandbox): ``SETUID``/``SETGID`` (switch to the selected user),
#: ``CHOWN``/``FOWNER``/``DAC_OVERRIDE``/``FSETID`` (root's file operations inside its own
#: tree), ``KILL`` (signal processes of other users). Processes of the default user hold none;
#: root's processes (``user="root"``, ``sudo``) hold these and nothing else.
GUEST_CAPABILITIES = ("CHOWN", "DAC_OVERRIDE", "FOWNER", "FSETID", "KILL", "SETGID", "SETUID")
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
class VolumeMount:
    """A team volume mounted into a sandbox (E2B ``volumeMounts``): ``source`` is the host
    mount of its file system (``volumes``), ``target`` the absolute path inside. The stage
    binds it idmapped to the sandbox's uid range, ``nosuid,nodev`` (``_stage``)."""

    volume_id: str
    name: str
    source: Path
    target: str


@dataclass(frozen=True)
class SandboxSpec:
    """Everything a runtime needs to start one sandbox."""

    sandbox_id: str
    image_ref: str
    host_dir: Path
    cpu_count: int
    memory_mb: int
    #: The sandbox's disk: its copy-on-write layer over the template (bytes and inodes).
    disk_mib: int
    pids_limit: int
    nofile: int
    #: Pseudo-terminals the sandbox may hold at once (its own devpts instance).
    max_ptys: int = 64
    #: Files the runtime writes into the sandbox's layer before it starts (``/etc/hosts``,
    #: the ``sudo`` shim); see ``sandbox_seeds``.
    seeds: tuple[Seed, ...] = ()
    #: Team volumes to mount, parents before children.
    volumes: tuple[VolumeMount, ...] = ()
    labels: dict[str, str] = field(default_factory=dict)
    #: A layer archive (``Runtime.save_layer``) the sandbox's layer starts as, instead of
    #: empty: a snapshot restored or a sandbox paused to disk coming back. Processes are not
    #: in it; the sandbox boots fresh over these files.
    layer: Path | None = None
    #: ``image_ref``'s content id when it is on record (a template's build), else empty:
    #: lets a runtime find the image's exported tree without asking the engine.
    image_id: str = ""
    #: The guest's archive, one for every sandbox: the runtime binds it read-only over the
    #: host directory's ``guest.pyz`` (a placeholder) instead of each sandbox holding a copy.
    #: None: the host directory's own ``guest.pyz`` is the guest.
    guest: Path | None = None


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

    async def stats(self, sandbox_ids: Sequence[str]) -> dict[str, SandboxStats]:
        """One reading (CPU time, memory, disk) of each of ``sandbox_ids`` that runs here,
        all read in one worker thread from the kernel's counters (``_stats``): no subprocess
        and no engine call per sample. Sandboxes that are not running are left out."""
        ...

    async def layer_in_use(self, sandbox_id: str) -> int:
        """Bytes in use on the sandbox's disk: the most ``save_layer`` will write."""
        ...

    async def guest_log(self, sandbox_id: str, limit: int = 4096) -> str:
        """The last ``limit`` bytes the sandbox's guest wrote to its log ("" if none), for
        the gateway's log when a sandbox fails to start: the sandbox, and its log with it,
        is removed right after."""
        ...

    async def save_layer(self, sandbox_id: str, archive: Path) -> int:
        """Writes the sandbox's layer (every file it has written, owners relative to its uid
        range) to ``archive``, which must not exist, and returns its size. The sandbox must be
        paused (frozen) so the copy is consistent; it stays as it is. Nothing is left at
        ``archive`` on failure."""
        ...


def memory_limit_bytes(spec: SandboxSpec) -> int:
    """The sandbox's cgroup memory limit (swap included, i.e. none): what its processes may
    use (``memory_mb``) plus its in-memory file systems at their full size, inodes included.

    Why: a sandbox's disk (its copy-on-write layer) and ``/dev/shm`` live in RAM (tmpfs) and
    are charged to its cgroup. Counted inside ``memory_mb``, a download bigger than the memory
    limit would make the kernel OOM-kill processes until the guest itself goes, leaving a
    sandbox nobody can reach. With the file systems budgeted on top, a full disk answers
    ENOSPC and the processes keep ``memory_mb``.
    """
    filesystems_mb = spec.disk_mib + SHM_MB
    inodes = inode_limit(spec.disk_mib) + inode_limit(SHM_MB)
    return (spec.memory_mb + filesystems_mb) * _MIB + inodes * _INODE_BYTES


def guest_command(listen_fd: int = GUEST_LISTEN_FD) -> list[str]:
    """The argv that starts the guest daemon inside a sandbox (as its PID 1), serving the
    listening socket it inherits as ``listen_fd``."""
    guest = GUEST_DIR_IN_SANDBOX
    return [
        "python3", "-I", "-S", "-c", GUEST_BOOT, f"{guest}/{GUEST_ARCHIVE}",
        "--listen-fd", str(listen_fd),
        "--config", f"{guest}/guest.json",
    ]  # fmt: skip


_HOSTS = "127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n127.0.1.1\tsandbox\n"
#: ``/usr/bin/sudo`` in every sandbox: passwordless root *inside the sandbox's own user
#: namespace*, granted by the guest (which already runs commands as root on the API's behalf)
#: instead of a setuid binary, so every mount stays ``nosuid`` and every process keeps
#: ``no_new_privs``. The operator turns it off with ``sandbox.sudo: false`` (the guest refuses).
SUDO_SHIM = f"""#!/bin/sh
# Sandgate: sudo asks this sandbox's guest to run the command as root inside the sandbox.
code='import sys; sys.path.insert(0, "{GUEST_DIR_IN_SANDBOX}/{GUEST_ARCHIVE}")'
code="$code; from sandgate.guest.sudo import main; main()"
for py in /usr/bin/python3 /usr/local/bin/python3; do
    [ -x "$py" ] && exec "$py" -I -S -c "$code" "$@"
done
command -v python3 >/dev/null 2>&1 && exec python3 -I -S -c "$code" "$@"
echo "sudo: python3 is not installed in this sandbox" >&2
exit 1
"""


def sandbox_seeds() -> tuple[Seed, ...]:
    """The files every sandbox's layer starts with, on every runtime."""
    return (
        Seed("etc/hosts", _HOSTS.encode()),
        Seed("etc/hostname", b"sandbox\n"),
        Seed("usr/bin/sudo", SUDO_SHIM.encode(), 0o755),
    )
