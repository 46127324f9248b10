"""The bwrap runtime's cgroup v2 code (``runtimes/_cgroups.py``) against a real cgroup2 mount.

On a v2 host that is ``/sys/fs/cgroup`` with its controllers, and the whole life cycle runs,
limits included. On a v1 host (like the CI machine) the kernel still mounts a controller-less
cgroup2 hierarchy (``/sys/fs/cgroup/unified``): the v2 mechanics the runtime relies on that need
no controller (moving processes, ``cgroup.freeze`` and ``cgroup.events`` for pause/resume,
``cgroup.kill`` for kill, removal) run there for real; writing the limits is then checked to
fail with a clear error instead of starting a sandbox unlimited.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from sandgate.errors import RuntimeUnavailable
from sandgate.runtimes._cgroups import REQUIRED_V2, CgroupHost, CgroupLimits, SandboxCgroup
from tests.framework.sandbox_http import wait_for

LIMITS = CgroupLimits(memory_bytes=64 * 1024 * 1024, pids=32, cpus=1)


def _cgroup2_mount() -> Path:
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        left, _, right = line.partition(" - ")
        if right.split()[0] == "cgroup2":
            return Path(left.split()[4])
    pytest.fail("this kernel mounts no cgroup2 hierarchy; mount one (mount -t cgroup2 none DIR)")


@pytest.fixture
def cgroup() -> Iterator[SandboxCgroup]:
    root = _cgroup2_mount()
    available = (root / "cgroup.controllers").read_text().split()
    missing = tuple(c for c in REQUIRED_V2 if c not in available)
    host = CgroupHost(2, {c: root for c in available}, missing, root=root)
    group = SandboxCgroup(host, f"test-v2-{os.getpid()}")
    yield group
    group.kill_all()
    group.remove()


def test_v2_life_cycle_on_a_real_cgroup2_mount(cgroup: SandboxCgroup) -> None:
    if cgroup.host.missing:
        # No controllers on this hierarchy: the limits cannot be set, and that must be an
        # error that names them (never a sandbox without limits).
        with pytest.raises(RuntimeUnavailable, match="memory"):
            cgroup.create(LIMITS)
        cgroup.paths[0].mkdir(parents=True)
    else:
        cgroup.create(LIMITS)
        unified = cgroup.paths[0]
        assert int((unified / "memory.max").read_text()) == LIMITS.memory_bytes
        assert (unified / "pids.max").read_text().strip() == "32"
    # A process that forks a child: both must be frozen, thawed and killed as one.
    # It forks only once it is in the cgroup (after reading a line), so the child is born there.
    parent = subprocess.Popen(["sh", "-c", "read go; sleep 300 & wait"], stdin=subprocess.PIPE)
    assert parent.stdin is not None
    try:
        cgroup.add(parent.pid)
        assert cgroup.holds(parent.pid) and not cgroup.holds(os.getpid())
        assert cgroup.join_files() == []  # v2 moves whole processes only, from outside
        parent.stdin.write(b"go\n")
        parent.stdin.flush()
        child = wait_for(
            lambda: [p for p in cgroup.pids() if p != parent.pid], 5, "the child to start"
        )[0]
        assert sorted(cgroup.pids()) == sorted([parent.pid, child])
        cgroup.freeze()
        assert cgroup.frozen()
        assert "frozen 1" in (cgroup.paths[0] / "cgroup.events").read_text()
        cgroup.thaw()
        assert not cgroup.frozen()
        cgroup.kill_all()
        assert cgroup.pids() == []
        assert parent.wait(timeout=5) == -9
        cgroup.remove()
        assert not cgroup.exists()
    finally:
        if parent.poll() is None:
            parent.kill()
