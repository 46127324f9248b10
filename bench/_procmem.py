"""Memory and CPU of processes as the host sees them: a sandbox's memory cgroup and the PSS
of its processes, a process's CPU time.

Standard library only, so both the benchmarks in Sandgate's environment and the peers' driver
(``bench/workers/peers_driver.py``, in its own locked environment) read them the same way.
"""

from __future__ import annotations

import os
from pathlib import Path


def cgroup_memory(pid: int) -> tuple[int, list[int]]:
    """(memory cgroup usage in bytes, pids in that cgroup) of ``pid``."""
    for line in Path(f"/proc/{pid}/cgroup").read_text().splitlines():
        _, controllers, path = line.split(":", 2)
        if "memory" in controllers.split(","):
            base = Path("/sys/fs/cgroup/memory") / path.lstrip("/")
            usage = int((base / "memory.usage_in_bytes").read_text())
            return usage, [int(p) for p in (base / "cgroup.procs").read_text().split()]
        if controllers == "":
            base = Path("/sys/fs/cgroup") / path.lstrip("/")
            if (base / "memory.current").exists():
                usage = int((base / "memory.current").read_text())
                return usage, [int(p) for p in (base / "cgroup.procs").read_text().split()]
    raise RuntimeError(f"no memory cgroup for {pid}")


def pss(pid: int) -> int:
    """Proportional set size of ``pid`` in bytes (0 once it is gone)."""
    try:
        text = Path(f"/proc/{pid}/smaps_rollup").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return 0
    for line in text.splitlines():
        if line.startswith("Pss:"):
            return int(line.split()[1]) * 1024
    return 0


def process_tree(root: int) -> list[int]:
    """``root`` and every descendant, read from /proc (children lists of each task)."""
    found: list[int] = []
    todo = [root]
    while todo:
        pid = todo.pop()
        found.append(pid)
        for task in Path(f"/proc/{pid}/task").glob("*"):
            try:
                todo.extend(int(c) for c in (task / "children").read_text().split())
            except (FileNotFoundError, ProcessLookupError):
                continue
    return found


def cpu_seconds(pid: int) -> float:
    """User + system CPU time so far of a live process (all its threads)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def host_cpu_seconds() -> float:
    """CPU time the whole host has spent so far, every core (all but idle and iowait)."""
    fields = [int(value) for value in Path("/proc/stat").read_text().split("\n")[0].split()[1:8]]
    return (sum(fields) - fields[3] - fields[4]) / os.sysconf("SC_CLK_TCK")


def parent(pid: int) -> int:
    """The parent pid of ``pid`` (from /proc/<pid>/stat; the name may hold spaces)."""
    stat = Path(f"/proc/{pid}/stat").read_text()
    return int(stat.rsplit(")", 1)[1].split()[1])


def mem_available() -> int:
    """The host's MemAvailable in bytes."""
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("MemAvailable:"):
            return int(line.split()[1]) * 1024
    raise RuntimeError("no MemAvailable in /proc/meminfo")
