"""Resource readings of running sandboxes, from the kernel's own counters (both runtimes).

A sandbox's CPU time and memory come from its cgroup (Docker's container cgroup, or the bwrap
runtime's ``sandgate/<id>``), on cgroup v1 or v2; its disk from ``statvfs`` of its disk, the
tmpfs its copy-on-write layer lives on (``<stage>/disk``). A reading is a handful of small
reads and one ``statvfs`` per sandbox, done for many sandboxes in one call (the caller runs it
in one worker thread): no subprocess, no Docker API call per sample.

=========  ===============================  ===================================
           cgroup v1                        cgroup v2
=========  ===============================  ===================================
CPU        ``cpuacct.usage`` (ns)           ``cpu.stat`` ``usage_usec``
memory     ``memory.usage_in_bytes``        ``memory.current``
cache      ``memory.stat`` ``total_cache``  ``memory.stat`` ``file``
=========  ===============================  ===================================

The cache includes tmpfs pages (``shmem``): the sandbox's disk and ``/dev/shm`` live in memory
charged to its cgroup (``base.memory_limit_bytes``).

SECURITY: only counters are read, never written, and every path is derived on the host (from
the runtime's own records or from ``/proc/<init pid>/cgroup`` read from the host's cgroup
namespace); nothing inside a sandbox can name a file read here. A sandbox can at most make its
own readings wrong (it cannot: its cgroup files are read-only to it).
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

__all__ = ["CgroupFiles", "SandboxStats", "cgroup_files_of_pid", "read_many", "read_stats"]


@dataclass(frozen=True)
class SandboxStats:
    """One reading of a sandbox. ``cpu_ns`` is cumulative (None: this host does not account
    CPU per sandbox, e.g. cgroup v1 without ``cpuacct``); the rest are current bytes."""

    cpu_ns: int | None
    mem_usage: int
    mem_cache: int
    disk_used: int
    disk_total: int
    #: ``time.monotonic()`` when read, for rates between two readings.
    taken: float


@dataclass(frozen=True)
class CgroupFiles:
    """Where one sandbox's counters are: ``cpu`` (v1: its ``cpuacct`` directory) and
    ``memory`` (v1: its ``memory`` directory); on v2 both are its one directory."""

    version: int
    cpu: Path | None
    memory: Path


def read_many(
    sandboxes: Mapping[str, tuple[CgroupFiles, Path]],
) -> dict[str, SandboxStats]:
    """Reads every ``sandbox id -> (cgroup files, disk)``; a sandbox whose counters are gone
    (it ended meanwhile) is left out. Blocking: call it from a worker thread."""
    found: dict[str, SandboxStats] = {}
    for sandbox_id, (files, disk) in sandboxes.items():
        stats = read_stats(files, disk)
        if stats is not None:
            found[sandbox_id] = stats
    return found


def read_stats(files: CgroupFiles, disk: Path) -> SandboxStats | None:
    """One reading, or None if the cgroup or the disk is gone."""
    try:
        if files.version == 2:
            usage = _int(files.memory / "memory.current")
            cache = _stat_field(files.memory / "memory.stat", "file")
            cpu = _cpu_v2(files.cpu)
        else:
            usage = _int(files.memory / "memory.usage_in_bytes")
            cache = _v1_cache(files.memory / "memory.stat")
            cpu = _cpu_v1(files.cpu)
        disk_stat = os.statvfs(disk)
    except (FileNotFoundError, ProcessLookupError, NotADirectoryError, ValueError):
        return None
    except OSError:
        return None
    total = disk_stat.f_blocks * disk_stat.f_frsize
    used = (disk_stat.f_blocks - disk_stat.f_bfree) * disk_stat.f_frsize
    return SandboxStats(cpu, usage, cache, used, total, time.monotonic())


def cgroup_files_of_pid(pid: int, mountinfo: str | None = None) -> CgroupFiles | None:
    """The cgroup directories of process ``pid`` (e.g. a Docker container's init), read from
    the host's view; None if the process is gone or its memory cgroup cannot be found."""
    try:
        membership = Path(f"/proc/{pid}/cgroup").read_text()
    except OSError:
        return None
    mounts = cgroup_mounts(mountinfo if mountinfo is not None else _read_mountinfo())
    return files_from(membership, mounts)


def files_from(membership: str, mounts: Mapping[str, tuple[Path, str]]) -> CgroupFiles | None:
    """Resolves ``/proc/<pid>/cgroup`` text against mounts (``controller -> (mount point,
    mount root)``, the unified hierarchy under ``""``). v1 controllers win when the memory
    controller is mounted as v1 (a hybrid host's unified hierarchy has no controllers)."""
    v1: dict[str, str] = {}
    unified: str | None = None
    for line in membership.splitlines():
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        _, controllers, path = parts
        if controllers == "" and parts[0] == "0":
            unified = path
            continue
        for controller in controllers.split(","):
            v1[controller] = path
    if "memory" in v1 and "memory" in mounts:
        memory = _join(mounts["memory"], v1["memory"])
        cpu = None
        if "cpuacct" in v1 and "cpuacct" in mounts:
            cpu = _join(mounts["cpuacct"], v1["cpuacct"])
        return CgroupFiles(1, cpu, memory)
    if unified is not None and "" in mounts:
        directory = _join(mounts[""], unified)
        return CgroupFiles(2, directory, directory)
    return None


def _join(mount: tuple[Path, str], path: str) -> Path:
    point, root = mount
    relative = path
    if root != "/" and (path == root or path.startswith(root.rstrip("/") + "/")):
        relative = path[len(root) :]
    return point / relative.lstrip("/")


def _read_mountinfo() -> str:
    return Path("/proc/self/mountinfo").read_text()


def cgroup_mounts(mountinfo: str) -> dict[str, tuple[Path, str]]:
    """Mounted cgroup hierarchies from ``/proc/self/mountinfo`` text: each v1 controller (and
    ``""`` for the unified hierarchy) to its ``(mount point, mount root)``."""
    found: dict[str, tuple[Path, str]] = {}
    for line in mountinfo.splitlines():
        left, _, right = line.partition(" - ")
        fields, rest = left.split(), right.split()
        if len(fields) < 5 or len(rest) < 3:
            continue
        root, point, fstype = fields[3], Path(fields[4]), rest[0]
        if fstype == "cgroup2":
            found.setdefault("", (point, root))
        elif fstype == "cgroup":
            for option in rest[2].split(","):
                found.setdefault(option, (point, root))
    return found


def _int(path: Path) -> int:
    with open(path, "rb") as file:
        return int(file.read().split()[0])


def _stat_field(path: Path, name: str) -> int:
    key = name.encode()
    with open(path, "rb") as file:
        for line in file:
            field, _, value = line.partition(b" ")
            if field == key:
                return int(value)
    return 0


def _v1_cache(path: Path) -> int:
    """``total_cache`` (the cgroup and its children), else ``cache``."""
    values: dict[bytes, int] = {}
    with open(path, "rb") as file:
        for line in file:
            field, _, value = line.partition(b" ")
            if field in (b"total_cache", b"cache"):
                values[field] = int(value)
    return values.get(b"total_cache", values.get(b"cache", 0))


def _cpu_v1(directory: Path | None) -> int | None:
    if directory is None:
        return None
    with contextlib.suppress(FileNotFoundError):
        return _int(directory / "cpuacct.usage")
    return None


def _cpu_v2(directory: Path | None) -> int | None:
    if directory is None:
        return None
    with contextlib.suppress(FileNotFoundError):
        return _stat_field(directory / "cpu.stat", "usage_usec") * 1000
    return None
