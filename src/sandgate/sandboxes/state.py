"""The sandbox state machine: named states and the one table of legal moves."""

from __future__ import annotations

from enum import StrEnum

from sandgate.errors import Conflict


class SandboxState(StrEnum):
    #: Row written, runtime asked to start; counts against quotas.
    STARTING = "starting"
    #: The guest answered; the data plane is open.
    RUNNING = "running"
    #: Frozen by the runtime; resumed by connect.
    PAUSED = "paused"
    #: Gone for good: killed, timed out or lost. Terminal.
    KILLED = "killed"


_ALLOWED = {
    SandboxState.STARTING: {SandboxState.RUNNING, SandboxState.KILLED},
    SandboxState.RUNNING: {SandboxState.PAUSED, SandboxState.KILLED},
    SandboxState.PAUSED: {SandboxState.RUNNING, SandboxState.KILLED},
    SandboxState.KILLED: set(),
}


def check_transition(sandbox_id: str, current: SandboxState, target: SandboxState) -> None:
    """Raises ``Conflict`` naming the current state when the move is not allowed."""
    if target not in _ALLOWED[current]:
        raise Conflict(f"cannot move sandbox {sandbox_id} to {target.value}: it is {current.value}")
