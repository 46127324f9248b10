"""What the posture tests read from the host: capability masks and ``/proc/<pid>/status``."""

from __future__ import annotations

from pathlib import Path

from sandgate.runtimes.base import GUEST_CAPABILITIES

_CAP_BITS = {
    "CHOWN": 0,
    "DAC_OVERRIDE": 1,
    "FOWNER": 3,
    "FSETID": 4,
    "KILL": 5,
    "SETGID": 6,
    "SETUID": 7,
}
#: The capability mask of the guest's documented set (the same on both runtimes).
GUEST_MASK = sum(1 << _CAP_BITS[name] for name in GUEST_CAPABILITIES)

_MIB = 1024 * 1024
#: The cgroup memory limit of a sandbox on default limits (docs/operations.md): 512 MiB for
#: processes, plus the in-memory file systems at full size (its disk, 2048 MiB, and /dev/shm,
#: 64 MiB) and 1 KiB for each of their inodes (64 per MiB).
DEFAULT_MEMORY_LIMIT = (512 + 2048 + 64) * _MIB + (2048 + 64) * 64 * 1024


def proc_status(pid: int) -> dict[str, str]:
    """The fields of ``/proc/<pid>/status`` (``CapEff``, ``NoNewPrivs``, ``Seccomp``, ...)."""
    fields = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, value = line.partition(":")
        fields[key] = value.strip()
    return fields


def process_tree(root: int) -> list[int]:
    """``root`` and every process under it, read from ``/proc/<pid>/task/*/children``: a
    check scoped to one sandbox (whose orphans are re-parented to its init) or one tool
    never looks at other work on the host. Processes that end meanwhile are skipped."""
    found: list[int] = []
    pending = [root]
    while pending:
        pid = pending.pop()
        try:
            tasks = list(Path(f"/proc/{pid}/task").iterdir())
        except OSError:
            continue
        found.append(pid)
        for task in tasks:
            try:
                pending += [int(p) for p in (task / "children").read_text().split()]
            except OSError:
                continue
    return found


def started(pid: int) -> int | None:
    """When ``pid`` started (clock ticks since boot), or None once it is gone or a zombie;
    with the pid, it names one process even if the pid is used again."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = stat.rpartition(")")[2].split()
    return None if fields[0] == "Z" else int(fields[19])


def cmdline(pid: int) -> bytes:
    """``pid``'s NUL-separated argv (empty once it is gone)."""
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return b""
