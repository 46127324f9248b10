"""Per-sandbox cgroups for the bwrap runtime, on cgroup v1 and v2 hosts.

bubblewrap has no resource control of its own (security.md §3.2): the runtime puts every
process of a sandbox into one cgroup per sandbox, sets memory (no swap), pids and CPU limits,
freezes it for pause, and kills everything in it on kill or timeout (RES-10).

* v2 (``cgroup2`` at ``/sys/fs/cgroup``): ``/sys/fs/cgroup/sandgate/<name>`` with ``memory.max``,
  ``memory.swap.max=0``, ``pids.max``, ``cpu.max``; ``cgroup.freeze``; ``cgroup.kill``.
* v1: one directory per hierarchy, ``<mount of controller>/sandgate/<name>``:
  ``memory.limit_in_bytes`` (and ``memory.memsw.limit_in_bytes`` when swap accounting is on),
  ``pids.max``, ``cpu.cfs_quota_us``; ``freezer.state``; kill = freeze, SIGKILL every task,
  thaw. ``cpuacct`` too when the host mounts it apart from ``cpu``: it counts the sandbox's
  CPU time for its metrics (``_stats``) and limits nothing.

Trust: the names come from the runtime (sandbox ids are ``[a-z0-9]+``), never from a request.
Only root can write here; a sandbox has its own cgroup namespace and no write access.
"""

from __future__ import annotations

import contextlib
import errno
import os
import signal
import time
from dataclasses import dataclass
from pathlib import Path

from sandgate.errors import RuntimeUnavailable
from sandgate.runtimes._stats import CgroupFiles

__all__ = ["CgroupHost", "CgroupLimits", "SandboxCgroup", "detect"]

_ROOT = Path("/sys/fs/cgroup")
_PARENT = "sandgate"
#: Controllers a sandbox needs; a host without one cannot run bwrap sandboxes.
REQUIRED_V1 = ("memory", "pids", "cpu", "freezer")
#: Used when present (CPU accounting for metrics); a host without it runs sandboxes all the same.
OPTIONAL_V1 = ("cpuacct",)
REQUIRED_V2 = ("memory", "pids", "cpu")
_SETTLE_TIMEOUT_S = 5.0


@dataclass(frozen=True)
class CgroupLimits:
    memory_bytes: int
    pids: int
    cpus: int


@dataclass(frozen=True)
class CgroupHost:
    """What this host offers: ``version`` 1 or 2, the mount point of each usable controller,
    and the required controllers that are missing (each with the fix)."""

    version: int
    mounts: dict[str, Path]
    missing: tuple[str, ...]
    #: The cgroup2 mount (v2 only).
    root: Path = _ROOT


def detect(mountinfo: str | None = None) -> CgroupHost:
    """Reads ``/proc/self/mountinfo`` (or ``mountinfo``) and says which layout is usable."""
    text = mountinfo if mountinfo is not None else Path("/proc/self/mountinfo").read_text()
    v1: dict[str, Path] = {}
    v2_root: Path | None = None
    for line in text.splitlines():
        left, _, right = line.partition(" - ")
        fields, rest = left.split(), right.split()
        if len(fields) < 5 or len(rest) < 3:
            continue
        mount_point, fstype, options = Path(fields[4]), rest[0], rest[2].split(",")
        if fstype == "cgroup2" and mount_point == _ROOT:
            v2_root = mount_point
        elif fstype == "cgroup":
            for option in options:
                if option in REQUIRED_V1 or option in OPTIONAL_V1:
                    v1.setdefault(option, mount_point)
    if v2_root is not None:
        try:
            available = (v2_root / "cgroup.controllers").read_text().split()
        except OSError:
            available = []
        missing = tuple(c for c in REQUIRED_V2 if c not in available)
        return CgroupHost(2, {c: v2_root for c in REQUIRED_V2 if c in available}, missing)
    missing = tuple(c for c in REQUIRED_V1 if c not in v1)
    return CgroupHost(1, v1, missing)


class SandboxCgroup:
    """The cgroup(s) of one sandbox. Methods raise ``RuntimeUnavailable`` on host failures."""

    def __init__(self, host: CgroupHost, name: str) -> None:
        self.host = host
        self.name = name
        if host.version == 2:
            self._dirs = {"unified": host.root / _PARENT / name}
        else:
            self._dirs = {c: host.mounts[c] / _PARENT / name for c in REQUIRED_V1}
            accounting = host.mounts.get("cpuacct")
            if accounting is not None and accounting != host.mounts.get("cpu"):
                self._dirs["cpuacct"] = accounting / _PARENT / name

    @property
    def paths(self) -> list[Path]:
        return list(self._dirs.values())

    def stat_files(self) -> CgroupFiles:
        """Where the sandbox's CPU and memory counters are (``_stats``)."""
        if self.host.version == 2:
            unified = self._dirs["unified"]
            return CgroupFiles(2, unified, unified)
        accounting = self._dirs.get("cpuacct")
        if accounting is None and "cpuacct" in self.host.mounts:
            accounting = self._dirs["cpu"]  # cpu and cpuacct share one hierarchy
        return CgroupFiles(1, accounting, self._dirs["memory"])

    def exists(self) -> bool:
        return any(path.is_dir() for path in self._dirs.values())

    def create(self, limits: CgroupLimits) -> None:
        """Makes the directories and writes the limits; fails if the cgroup already exists."""
        if self.host.missing:
            raise RuntimeUnavailable(missing_message(self.host))
        try:
            if self.host.version == 2:
                self._create_v2(limits)
            else:
                self._create_v1(limits)
        except OSError as exc:
            raise RuntimeUnavailable(
                f"cgroups: cannot create the sandbox's cgroup ({exc}); the bwrap runtime must "
                "run as root with a writable /sys/fs/cgroup"
            ) from None

    def _create_v1(self, limits: CgroupLimits) -> None:
        for path in self._dirs.values():
            path.parent.mkdir(exist_ok=True)
            path.mkdir()
        memory = self._dirs["memory"]
        _write(memory / "memory.limit_in_bytes", str(limits.memory_bytes))
        if (memory / "memory.memsw.limit_in_bytes").exists():
            _write(memory / "memory.memsw.limit_in_bytes", str(limits.memory_bytes))
        _write(memory / "memory.swappiness", "0")
        _write(self._dirs["pids"] / "pids.max", str(limits.pids))
        cpu = self._dirs["cpu"]
        _write(cpu / "cpu.cfs_period_us", "100000")
        _write(cpu / "cpu.cfs_quota_us", str(limits.cpus * 100000))

    def _create_v2(self, limits: CgroupLimits) -> None:
        root = self.host.root
        parent = root / _PARENT
        parent.mkdir(exist_ok=True)
        wanted = " ".join(f"+{c}" for c in REQUIRED_V2)
        _write(root / "cgroup.subtree_control", wanted)
        _write(parent / "cgroup.subtree_control", wanted)
        path = self._dirs["unified"]
        path.mkdir()
        _write(path / "memory.max", str(limits.memory_bytes))
        if (path / "memory.swap.max").exists():
            _write(path / "memory.swap.max", "0")
        _write(path / "pids.max", str(limits.pids))
        _write(path / "cpu.max", f"{limits.cpus * 100000} 100000")

    def join_files(self) -> list[Path]:
        """The files a single-threaded process writes ``0`` to in order to move itself into
        every hierarchy of the sandbox, or nothing where that is not possible (v2).

        Why: moving *another* process takes the kernel's global threadgroup lock for writing,
        whose first taker after a quiet spell waits out an RCU grace period (10-25 ms on a
        cgroup v1 VM of 2 vCPUs). A v1 ``tasks`` write of ``0`` moves only the writing thread
        and skips that lock (0.1-0.3 ms for five hierarchies); what the process then starts
        is born inside. v2 moves whole processes only (``cgroup.threads`` stays within a
        resource domain), so there the launcher is moved from outside with :meth:`add`."""
        if self.host.version == 2:
            return []
        return [path / "tasks" for path in self._dirs.values()]

    def holds(self, pid: int) -> bool:
        """Whether ``pid`` is in this sandbox's cgroup in every hierarchy (``/proc``)."""
        wanted = f"/{_PARENT}/{self.name}"
        lines = Path(f"/proc/{pid}/cgroup").read_text().splitlines()
        if self.host.version == 2:
            return any(line.startswith("0::") and line.endswith(wanted) for line in lines)
        inside = set()
        for line in lines:
            _, controllers, path = line.split(":", 2)
            if path.endswith(wanted):
                inside.update(controllers.split(","))
        return all(controller in inside for controller in self._dirs)

    def add(self, pid: int) -> None:
        """Moves a process (all its threads) into every hierarchy of the sandbox."""
        for path in self._dirs.values():
            _write(path / "cgroup.procs", str(pid))

    def pids(self) -> list[int]:
        found: set[int] = set()
        for path in self._dirs.values():
            try:
                found.update(int(p) for p in (path / "cgroup.procs").read_text().split())
            except FileNotFoundError:
                pass
            except OSError as exc:
                # ENODEV: the cgroup was removed between the open and the read (another
                # process ending the same sandbox): it has no processes any more.
                if exc.errno != errno.ENODEV:
                    raise
        return sorted(found)

    def freeze(self) -> None:
        """Stops every process; returns once the kernel reports the cgroup frozen."""
        self._set_frozen(True)

    def thaw(self) -> None:
        self._set_frozen(False)

    def frozen(self) -> bool:
        try:
            if self.host.version == 2:
                events = (self._dirs["unified"] / "cgroup.events").read_text()
                return "frozen 1" in events.splitlines()
            state = (self._dirs["freezer"] / "freezer.state").read_text().strip()
        except FileNotFoundError:
            return False
        return state in ("FROZEN", "FREEZING")

    def _set_frozen(self, frozen: bool) -> None:
        if self.host.version == 2:
            path = self._dirs["unified"] / "cgroup.freeze"
            _write(path, "1" if frozen else "0")
        else:
            path = self._dirs["freezer"] / "freezer.state"
            _write(path, "FROZEN" if frozen else "THAWED")
        if not frozen:
            return
        deadline = time.monotonic() + _SETTLE_TIMEOUT_S
        while not self._fully_frozen():
            if time.monotonic() > deadline:
                raise RuntimeUnavailable(f"cgroups: {self.name} did not freeze in time")
            time.sleep(0.002)

    def _fully_frozen(self) -> bool:
        if self.host.version == 2:
            return self.frozen()
        return (self._dirs["freezer"] / "freezer.state").read_text().strip() == "FROZEN"

    def kill_all(self) -> None:
        """SIGKILLs every process of the sandbox, including ones forked meanwhile, and waits
        until the cgroup is empty. Idempotent."""
        if not self.exists():
            return
        kill_file = self._dirs.get("unified", Path("/nonexistent")) / "cgroup.kill"
        if self.host.version == 2 and kill_file.exists():
            _write(kill_file, "1")
        else:
            # Frozen tasks cannot fork, so one pass over the task list catches them all.
            with contextlib.suppress(RuntimeUnavailable, OSError):
                self._set_frozen(True)
            for pid in self.pids():
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
            with contextlib.suppress(OSError):
                self._set_frozen(False)
        deadline = time.monotonic() + _SETTLE_TIMEOUT_S
        while self.pids():
            if time.monotonic() > deadline:
                raise RuntimeUnavailable(
                    f"cgroups: processes of {self.name} survived SIGKILL: {self.pids()}"
                )
            for pid in self.pids():  # anything that escaped the freeze (v1 without freezer)
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
            time.sleep(0.005)

    def remove(self) -> None:
        """Removes the (empty) directories; idempotent."""
        for path in self._dirs.values():
            deadline = time.monotonic() + _SETTLE_TIMEOUT_S
            while True:
                try:
                    path.rmdir()
                    break
                except FileNotFoundError:
                    break
                except OSError as exc:
                    if exc.errno != errno.EBUSY or time.monotonic() > deadline:
                        raise RuntimeUnavailable(
                            f"cgroups: cannot remove {path}: {exc.strerror}"
                        ) from None
                    time.sleep(0.005)


def missing_message(host: CgroupHost) -> str:
    names = ", ".join(host.missing)
    if host.version == 2:
        fix = (
            f"enable them for the root cgroup (`echo '+{' +'.join(host.missing)}' > "
            "/sys/fs/cgroup/cgroup.subtree_control`) or boot with them available"
        )
    else:
        fix = f"mount the v1 hierarchies (`mount -t cgroup -o {host.missing[0]} cgroup ...`)"
    where = f"this cgroup v{host.version} host"
    return f"cgroups: controller(s) {names} are not available on {where}: {fix}"


def _write(path: Path, value: str) -> None:
    fd = os.open(path, os.O_WRONLY)
    try:
        os.write(fd, value.encode())
    finally:
        os.close(fd)
