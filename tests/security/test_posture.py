"""Host-side posture of a running sandbox on every runtime (security.md ESC-01, with the
2026-12-01 revision): read from /proc, the cgroup tree and the mount table, and compared with
what the runtimes promise. The inside view (ESC-02) is in test_isolation.py; bwrap's extra
moving parts (its monitor, its cgroup) are in test_posture_bwrap.py."""

from __future__ import annotations

import os
import re
import stat
from pathlib import Path
from typing import Any

import docker
import pytest

from sandgate.runtimes.base import GUEST_CAPABILITIES
from tests.fixtures.runtimes import RuntimeView
from tests.framework.posture import DEFAULT_MEMORY_LIMIT, GUEST_MASK, proc_status

STAGE_DIR = Path("/run/sandgate-rt/stage")
_NAMESPACE_KINDS = {"user", "mnt", "pid", "net", "ipc", "uts", "cgroup", "time"}


def _cgroup_file(pid: int, controller: str, name: str) -> str:
    for line in Path(f"/proc/{pid}/cgroup").read_text().splitlines():
        _, controllers, path = line.split(":", 2)
        if controllers == "":  # cgroup v2
            return (Path("/sys/fs/cgroup") / path.lstrip("/") / name).read_text().strip()
        if controller in controllers.split(","):
            base = Path("/sys/fs/cgroup") / controllers
            return (base / path.lstrip("/") / name).read_text().strip()
    raise AssertionError(f"no {controller} cgroup for pid {pid}")


def test_ESC_01_host_side_posture(
    runtime_view: RuntimeView, runtime_sandbox: dict[str, Any]
) -> None:
    sandbox_id = runtime_sandbox["sandboxID"]
    guest = runtime_view.init_pid(sandbox_id)

    # The guest is the sandbox's PID 1, with exactly the documented capabilities (relative to
    # the sandbox's user namespace), no_new_privs and the seccomp filter.
    status = proc_status(guest)
    assert status["NSpid"].split()[-1] == "1"
    assert int(status["CapEff"], 16) == GUEST_MASK
    assert int(status["CapPrm"], 16) == GUEST_MASK
    assert int(status["CapBnd"], 16) == GUEST_MASK
    # bubblewrap raises the ambient set for its --cap-add; it gives nothing more (a process
    # that leaves uid 0 loses every set, one that stays root gets the bounding set anyway).
    assert int(status["CapAmb"], 16) & ~GUEST_MASK == 0
    assert status["NoNewPrivs"] == "1"
    assert status["Seccomp"] == "2"
    assert status["Uid"].split()[0] != "0"

    for ns in ("user", "mnt", "pid", "net", "ipc", "uts", "cgroup"):
        assert (
            Path(f"/proc/{guest}/ns/{ns}").readlink() != Path(f"/proc/self/ns/{ns}").readlink()
        ), ns
    inside, base, count = Path(f"/proc/{guest}/uid_map").read_text().split()
    assert inside == "0" and int(base) >= 1_000_000_000 and count == "65536"

    # Leaky Vessels precondition: the guest holds no descriptor of a host directory, and
    # none of a namespace (bubblewrap keeps its ``--userns`` fd open for what it starts).
    for fd in Path(f"/proc/{guest}/fd").iterdir():
        with_target = os.readlink(fd)
        if with_target.startswith("/"):
            assert not stat.S_ISDIR(os.stat(fd).st_mode), with_target
        assert with_target.partition(":")[0] not in _NAMESPACE_KINDS, with_target

    assert int(_cgroup_file(guest, "pids", "pids.max")) == 256
    memory = (
        _cgroup_file(guest, "memory", "memory.limit_in_bytes")
        if Path("/sys/fs/cgroup/memory").exists()
        else _cgroup_file(guest, "memory", "memory.max")
    )
    assert int(memory) == DEFAULT_MEMORY_LIMIT
    assert Path(f"/proc/{guest}/oom_score_adj").read_text().strip() == "500"
    limits = Path(f"/proc/{guest}/limits").read_text()
    assert re.search(r"Max open files\s+1024\s+1024", limits)
    assert re.search(r"Max core file size\s+0\s+0", limits)

    # The file system: the staged overlay (writable, nosuid, nodev) over the idmapped template,
    # the sandbox's own directory read-only, its own capped devpts.
    mounts = Path(f"/proc/{guest}/mountinfo").read_text().splitlines()
    options = {m.split()[4]: (m.split()[5], m.split(" - ")[1]) for m in mounts}
    root_opts, root_super = options["/"]
    assert root_super.startswith("overlay ") and "rw" in root_opts.split(",")
    assert {"nosuid", "nodev"} <= set(root_opts.split(","))
    assert f"{STAGE_DIR}/{sandbox_id}/lower" in root_super
    run_opts, _ = options["/run/sandgate"]
    assert {"ro", "nosuid", "nodev"} <= set(run_opts.split(","))
    # The guest's archive: one file for every sandbox, bound read-only over a placeholder of
    # the host directory (no copy per sandbox), its flags as strict as the directory's.
    archive_opts, _ = options["/run/sandgate/guest.pyz"]
    assert {"ro", "nosuid", "nodev"} <= set(archive_opts.split(","))
    inside = Path(f"/proc/{guest}/root/run/sandgate/guest.pyz")
    assert inside.stat().st_size > 100_000 and inside.read_bytes()[:2] == b"PK"
    runtime_view_home = runtime_view.server.home / "sandboxes" / sandbox_id
    assert (runtime_view_home / "guest.pyz").stat().st_size == 0
    assert options["/dev/pts"][1].startswith("devpts") and "max=64" in options["/dev/pts"][1]
    host_mounts = {
        line.split()[4]: line for line in Path("/proc/self/mountinfo").read_text().splitlines()
    }
    lower = host_mounts[f"{STAGE_DIR}/{sandbox_id}/lower"]
    assert "idmapped" in lower.split()[5] and "ro" in lower.split()[5].split(",")
    disk = host_mounts[f"{STAGE_DIR}/{sandbox_id}/disk"]
    assert "size=2097152k" in disk and "nr_inodes=131072" in disk


@pytest.mark.docker
@pytest.mark.parametrize("runtime", ["docker"], indirect=True)
def test_ESC_01_docker_container_settings(runtime_sandbox: dict[str, Any]) -> None:
    container = docker.from_env().containers.get(f"sandgate-{runtime_sandbox['sandboxID']}")
    host = container.attrs["HostConfig"]
    assert host["Runtime"] == "sandgate"  # Sandgate's shim: the per-sandbox user namespace
    assert host["Privileged"] is False
    assert host["ReadonlyRootfs"] is True  # Docker's own layer: the root is the staged overlay
    assert host["NetworkMode"] == "none"
    assert host["CapDrop"] == ["ALL"]
    assert sorted(host["CapAdd"]) == sorted(GUEST_CAPABILITIES)
    assert "no-new-privileges:true" in host["SecurityOpt"]
    assert not host["Init"]  # the guest is PID 1
    assert host["IpcMode"] == "private"
    assert not host.get("Devices")
    assert host["PidsLimit"] == 256
    assert host["Memory"] == host["MemorySwap"] == DEFAULT_MEMORY_LIMIT
    assert host["OomScoreAdj"] == 500
    binds = {m["Destination"]: m for m in container.attrs["Mounts"] if m["Type"] == "bind"}
    assert sorted(binds) == ["/dev/pts", "/run/sandgate"]  # the engine's order varies
    stage = f"{STAGE_DIR}/{runtime_sandbox['sandboxID']}"
    assert binds["/run/sandgate"]["Source"] == f"{stage}/run"
    assert binds["/run/sandgate"]["RW"] is False
    assert binds["/dev/pts"]["Source"] == f"{stage}/pts"
