"""Posture of a running Docker sandbox, read from the host (security.md ESC-01). The capability
set is Sandgate's documented one (runtimes/docker.py). The inside view (ESC-02) runs on every
runtime in test_isolation.py; bwrap's host view is test_posture_bwrap.py."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import docker
import pytest

from sandgate.runtimes.docker import GUEST_CAPABILITIES
from tests.framework.posture import DEFAULT_MEMORY_LIMIT, GUEST_MASK, proc_status

pytestmark = pytest.mark.docker


def _container(sandbox_id: str) -> Any:
    return docker.from_env().containers.get(f"sandgate-{sandbox_id}")


def _cgroup_file(pid: int, controller: str, name: str) -> str:
    for line in Path(f"/proc/{pid}/cgroup").read_text().splitlines():
        _, controllers, path = line.split(":", 2)
        if controllers == "":  # cgroup v2
            return (Path("/sys/fs/cgroup") / path.lstrip("/") / name).read_text().strip()
        if controller in controllers.split(","):
            base = Path("/sys/fs/cgroup") / controllers
            return (base / path.lstrip("/") / name).read_text().strip()
    raise AssertionError(f"no {controller} cgroup for pid {pid}")


def test_ESC_01_host_side_posture(sandbox: dict[str, Any]) -> None:
    container = _container(sandbox["sandboxID"])
    host = container.attrs["HostConfig"]
    pid = int(container.attrs["State"]["Pid"])

    status = proc_status(pid)
    assert int(status["CapEff"], 16) == GUEST_MASK
    assert int(status["CapPrm"], 16) == GUEST_MASK
    assert int(status["CapBnd"], 16) == GUEST_MASK
    assert int(status["CapAmb"], 16) == 0
    assert status["NoNewPrivs"] == "1"
    assert status["Seccomp"] == "2"

    # The test process stands for the host (PID 1 of the host may not be readable here).
    for ns in ("mnt", "pid", "net", "ipc", "uts", "cgroup"):
        assert Path(f"/proc/{pid}/ns/{ns}").readlink() != Path(f"/proc/self/ns/{ns}").readlink(), ns

    # Leaky Vessels precondition: init must hold no inherited directory descriptors.
    assert sorted(int(fd.name) for fd in Path(f"/proc/{pid}/fd").iterdir()) == [0, 1, 2]

    assert host["Privileged"] is False
    assert host["ReadonlyRootfs"] is True
    assert host["NetworkMode"] == "none"
    assert host["CapDrop"] == ["ALL"]
    assert sorted(host["CapAdd"]) == sorted(GUEST_CAPABILITIES)
    assert "no-new-privileges:true" in host["SecurityOpt"]
    assert host["Init"] is True
    assert host["IpcMode"] == "private"
    assert not host.get("Devices")
    assert host["PidsLimit"] == 256
    assert host["Memory"] == host["MemorySwap"] == DEFAULT_MEMORY_LIMIT
    assert host["OomScoreAdj"] == 500
    mounts = container.attrs["Mounts"]
    binds = [m for m in mounts if m["Type"] == "bind"]
    by_target = {m["Destination"]: m["Source"] for m in binds}
    assert sorted(by_target) == ["/dev/pts", "/run/sandgate"]  # the engine's order varies
    assert by_target["/run/sandgate"].endswith(f"/sandboxes/{sandbox['sandboxID']}")
    # The sandbox's own devpts instance, capped (RES-14), not a host path.
    assert by_target["/dev/pts"].endswith(f"/docker/pts/{sandbox['sandboxID']}")
    devpts = next(
        line.split()
        for line in Path("/proc/self/mountinfo").read_text().splitlines()
        if line.split()[4] == by_target["/dev/pts"]
    )
    assert "devpts" in devpts and "max=64" in devpts[-1]

    assert int(_cgroup_file(pid, "pids", "pids.max")) == 256
    memory = (
        _cgroup_file(pid, "memory", "memory.limit_in_bytes")
        if Path("/sys/fs/cgroup/memory").exists()
        else _cgroup_file(pid, "memory", "memory.max")
    )
    assert int(memory) == DEFAULT_MEMORY_LIMIT
    assert Path(f"/proc/{pid}/oom_score_adj").read_text().strip() == "500"
    limits = Path(f"/proc/{pid}/limits").read_text()
    assert re.search(r"Max open files\s+1024\s+1024", limits)
    assert re.search(r"Max core file size\s+0\s+0", limits)
