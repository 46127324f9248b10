"""What a server leaves for the next one: its contexts and the kernel processes it started.

The supervisor restarts a server that was killed or crashed; the new server reads this file,
so every context keeps its id, language, cwd and user (its kernel starts afresh: variables
are lost, as when a kernel dies), and it stops the kernels the old server left running, which
would otherwise hold memory until the sandbox ends.

The file is JSON, replaced atomically (write to a temporary file, then rename). A file that
is missing or unreadable means a fresh start: it is a convenience, never a reason for the
server not to come up.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import signal
import tempfile
from pathlib import Path
from typing import Any

__all__ = [
    "KernelRecord",
    "SavedContext",
    "State",
    "StateFile",
    "process_start_time",
    "stop_leftover",
]

_VERSION = 1


@dataclasses.dataclass(frozen=True, slots=True)
class SavedContext:
    id: str
    language: str
    cwd: str
    user: str | None
    default: bool


@dataclasses.dataclass(frozen=True, slots=True)
class KernelRecord:
    """A kernel process: its pid and start time (``/proc/<pid>/stat``), so a pid reused
    by an unrelated process is never taken for it."""

    pid: int
    started: int


@dataclasses.dataclass(frozen=True, slots=True)
class State:
    contexts: list[SavedContext] = dataclasses.field(default_factory=list)
    kernels: list[KernelRecord] = dataclasses.field(default_factory=list)


class StateFile:
    """The state at ``path``."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def load(self) -> State:
        """The saved state; an empty one when there is none or it cannot be read."""
        try:
            data = json.loads(self.path.read_text(encoding="utf-8"))
            if data.get("version") != _VERSION:
                return State()
            return State(
                [_context(item) for item in data.get("contexts", [])],
                [KernelRecord(int(k["pid"]), int(k["started"])) for k in data.get("kernels", [])],
            )
        except (OSError, ValueError, TypeError, KeyError, AttributeError):
            return State()

    def save(self, state: State) -> None:
        """Replaces the file; a failure to write is ignored (the next save tries again)."""
        payload = {
            "version": _VERSION,
            "contexts": [dataclasses.asdict(c) for c in state.contexts],
            "kernels": [dataclasses.asdict(k) for k in state.kernels],
        }
        with contextlib.suppress(OSError):
            self.path.parent.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(prefix=".state-", dir=self.path.parent)
            try:
                with os.fdopen(fd, "w", encoding="utf-8") as handle:
                    json.dump(payload, handle)
                os.replace(tmp, self.path)
            except OSError:
                with contextlib.suppress(OSError):
                    os.unlink(tmp)
                raise


def _context(item: dict[str, Any]) -> SavedContext:
    user = item.get("user")
    return SavedContext(
        id=str(item["id"]),
        language=str(item["language"]),
        cwd=str(item["cwd"]),
        user=str(user) if user is not None else None,
        default=bool(item.get("default", False)),
    )


def process_start_time(pid: int) -> int | None:
    """The start time of process ``pid`` in clock ticks since boot, or ``None`` if it is
    gone (field 22 of ``/proc/<pid>/stat``, read after the command name, which may hold
    spaces and parentheses)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = stat[stat.rfind(")") + 2 :].split()
    try:
        return int(fields[19])
    except (IndexError, ValueError):
        return None


def stop_leftover(kernel: KernelRecord) -> bool:
    """Kills ``kernel``'s process group if that process still runs; True if it did."""
    if process_start_time(kernel.pid) != kernel.started:
        return False
    try:
        group = os.getpgid(kernel.pid)
        if group == kernel.pid:
            os.killpg(group, signal.SIGKILL)
        else:
            os.kill(kernel.pid, signal.SIGKILL)
    except OSError:
        return False
    return True
