"""The state machines of sandboxes and of their saved disks: named states, one table each.

Sandbox::

    STARTING ──► RUNNING ◄──────────► PAUSED      freeze / thaw: memory kept
                   │   ▲                 │
                   │   └── RESUMING ◄─┐  │        cold boot over the saved layer
                   │          │       │  │
                   └────────► STORED ◄┴──┘        pause to disk (RESUMING falls back here)
    every state but KILLED ──► KILLED             terminal

Snapshot (a saved disk)::

    SAVING ──► READY ──► (deleted: the row goes)
       └─────► (failed or interrupted: the row goes)
"""

from __future__ import annotations

from enum import StrEnum

from sandgate.errors import Conflict

__all__ = ["SandboxState", "SnapshotKind", "SnapshotState", "check_transition"]


class SandboxState(StrEnum):
    #: Row written, runtime asked to start; counts against quotas.
    STARTING = "starting"
    #: The guest answered; the data plane is open.
    RUNNING = "running"
    #: Frozen by the runtime (memory kept); resumed by connect, or by traffic (auto_resume).
    PAUSED = "paused"
    #: Paused to disk: no processes, no memory, no runtime sandbox; its layer is kept under
    #: the gateway's home (a ``pause`` snapshot). Connect cold-boots it with the same id,
    #: token and files. Holds disk only, so it does not count against sandbox quotas.
    STORED = "stored"
    #: A stored sandbox booting again over its saved layer; counts as live. Back to STORED
    #: if the boot fails or the gateway restarts meanwhile (nothing saved is lost).
    RESUMING = "resuming"
    #: Gone for good: killed, timed out or lost. Terminal.
    KILLED = "killed"


_ALLOWED = {
    SandboxState.STARTING: {SandboxState.RUNNING, SandboxState.KILLED},
    SandboxState.RUNNING: {SandboxState.PAUSED, SandboxState.STORED, SandboxState.KILLED},
    SandboxState.PAUSED: {SandboxState.RUNNING, SandboxState.STORED, SandboxState.KILLED},
    SandboxState.STORED: {SandboxState.RESUMING, SandboxState.KILLED},
    SandboxState.RESUMING: {SandboxState.RUNNING, SandboxState.STORED, SandboxState.KILLED},
    SandboxState.KILLED: set(),
}

#: How each state reads in a refusal ("cannot pause sandbox abc: it is paused").
_SPOKEN = {SandboxState.STORED: "paused (to disk)", SandboxState.RESUMING: "resuming"}


def check_transition(sandbox_id: str, current: SandboxState, target: SandboxState) -> None:
    """Raises ``Conflict`` naming the current state when the move is not allowed."""
    if target not in _ALLOWED[current]:
        verb = {
            SandboxState.PAUSED: "pause",
            SandboxState.STORED: "pause",
            SandboxState.RUNNING: "resume",
            SandboxState.RESUMING: "resume",
        }.get(target)
        now = _SPOKEN.get(current, current.value)
        if verb is not None:
            raise Conflict(f"cannot {verb} sandbox {sandbox_id}: it is {now}")
        raise Conflict(f"cannot move sandbox {sandbox_id} to {target.value}: it is {now}")


class SnapshotKind(StrEnum):
    #: Taken through the API (``create_snapshot``): listed, restorable, deleted by its team.
    SNAPSHOT = "snapshot"
    #: The layer of a ``STORED`` sandbox; removed when it resumes or is killed.
    PAUSE = "pause"
    #: One capture shared by the sandboxes of a fork call; removed once they started.
    FORK = "fork"


class SnapshotState(StrEnum):
    #: Being written (the row holds the estimated size, so quotas count it).
    SAVING = "saving"
    #: Complete and fsynced; usable.
    READY = "ready"
