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
