"""Host-side posture of bwrap sandboxes (security.md ESC-01, MT-06, RES-10), read from /proc and
the cgroup tree and compared with what runtimes/bwrap.py promises."""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

import httpx
import pytest

from sandgate.runtimes.bwrap import UID_BASE, UIDS_PER_SANDBOX
from tests.fixtures.runtimes import RuntimeView
from tests.fixtures.server import RunningServer
from tests.framework.envd import create, run
from tests.framework.posture import DEFAULT_MEMORY_LIMIT, GUEST_MASK, proc_status

pytestmark = pytest.mark.parametrize("runtime", ["bwrap"], indirect=True)

MIB = 1024 * 1024


def _children(pid: int) -> list[int]:
    text = Path(f"/proc/{pid}/task/{pid}/children").read_text()
    return [int(p) for p in text.split()]


def _in_uid_range(base: int) -> list[int]:
    """Live (not zombie: the host's init reaps bubblewrap's monitor when it gets to it)
    processes running as a uid of the range starting at ``base``."""
    found = []
    for proc in Path("/proc").iterdir():
        if proc.name.isdigit():
            try:
                uid = proc.stat().st_uid
                state = proc_status(int(proc.name))["State"]
            except (FileNotFoundError, ProcessLookupError, KeyError):
                continue
            if base <= uid < base + UIDS_PER_SANDBOX and not state.startswith("Z"):
                found.append(int(proc.name))
    return found


def test_ESC_01_bwrap_host_side_posture(
    runtime_view: RuntimeView, runtime_sandbox: dict[str, Any]
) -> None:
    sandbox_id = runtime_sandbox["sandboxID"]
    state = runtime_view.state(sandbox_id)
    assert state is not None
    init = runtime_view.init_pid(sandbox_id)
    base = int(state["uid_base"])

    # bubblewrap's PID 1: no capabilities (its bounding set is the guest's), no_new_privs,
    # filtered.
    status = proc_status(init)
    for field in ("CapEff", "CapPrm", "CapAmb"):
        assert int(status[field], 16) == 0, field
    assert int(status["CapBnd"], 16) == GUEST_MASK
    assert status["NoNewPrivs"] == "1"
    assert status["Seccomp"] == "2"
    assert status["Uid"].split() == [str(base)] * 4

    # The guest (PID 2): exactly the guest's capability set, relative to its user namespace.
    (guest,) = _children(init)
    guest_status = proc_status(guest)
    assert int(guest_status["CapEff"], 16) == GUEST_MASK
    assert int(guest_status["CapBnd"], 16) == GUEST_MASK
    assert guest_status["NoNewPrivs"] == "1"
    assert guest_status["Seccomp"] == "2"

    for ns in ("user", "mnt", "pid", "net", "ipc", "uts", "cgroup"):
        assert Path(f"/proc/{init}/ns/{ns}").readlink() != Path(f"/proc/self/ns/{ns}").readlink(), (
            ns
        )

    # A multi-id map onto this sandbox's own unprivileged host range.
    assert Path(f"/proc/{init}/uid_map").read_text().split() == ["0", str(base), "65536"]
    assert Path(f"/proc/{init}/gid_map").read_text().split() == ["0", str(base), "65536"]
    assert base >= UID_BASE and (base - UID_BASE) % UIDS_PER_SANDBOX == 0

    # Leaky Vessels precondition: PID 1 holds stdio and bubblewrap's event fd, no directory.
    fds = {int(fd.name): os.readlink(fd) for fd in Path(f"/proc/{init}/fd").iterdir()}
    extra = {fd: target for fd, target in fds.items() if fd > 2}
    assert list(extra.values()) == ["anon_inode:[eventfd]"], fds
    log = runtime_view.server.home / "bwrap" / sandbox_id / "guest.log"
    assert fds[0] == fds[1] == "/dev/null" and fds[2] == str(log)

    cgroup = _cgroup_dirs(init)
    assert cgroup["pids"].name == sandbox_id
    assert int((cgroup["pids"] / "pids.max").read_text()) == 256
    if (cgroup["memory"] / "memory.limit_in_bytes").exists():
        assert int((cgroup["memory"] / "memory.limit_in_bytes").read_text()) == (
            DEFAULT_MEMORY_LIMIT
        )
        assert int((cgroup["cpu"] / "cpu.cfs_quota_us").read_text()) == 100000
    else:
        assert int((cgroup["memory"] / "memory.max").read_text()) == DEFAULT_MEMORY_LIMIT
        assert (cgroup["memory"] / "memory.swap.max").read_text().strip() == "0"
        assert (cgroup["cpu"] / "cpu.max").read_text().split() == ["100000", "100000"]
    # bubblewrap's monitor (outside the sandbox) is in the same cgroup and runs as the same uid.
    monitor = int(state["monitor_pid"])
    assert str(monitor) in (cgroup["pids"] / "cgroup.procs").read_text().split()
    assert proc_status(monitor)["Uid"].split()[0] == str(base)
    assert int(proc_status(monitor)["CapEff"], 16) == 0

    limits = Path(f"/proc/{init}/limits").read_text()
    assert re.search(r"Max open files\s+1024\s+1024", limits)
    assert re.search(r"Max core file size\s+0\s+0", limits)
    assert Path(f"/proc/{guest}/oom_score_adj").read_text().strip() == "500"

    # The file system: a read-only root, and one host directory (its own) mounted.
    mounts = Path(f"/proc/{guest}/mountinfo").read_text().splitlines()
    root = next(m.split() for m in mounts if m.split()[4] == "/")
    assert "ro" in root[5].split(",")
    assert all("nosuid" in m.split()[5] for m in mounts if m.split()[4] in ("/", "/run/sandgate"))
    # The home, /tmp and /dev/pts are the sandbox's own, capped (size, inodes, terminals).
    options = {m.split()[4]: m.split(" - ")[1] for m in mounts}
    assert "nr_inodes=65536" in options["/home/user"] and "size=1048576k" in options["/home/user"]
    assert "nr_inodes=4096" in options["/tmp"]
    assert options["/dev/pts"].startswith("devpts") and "max=64" in options["/dev/pts"]


def _cgroup_dirs(pid: int) -> dict[str, Path]:
    found: dict[str, Path] = {}
    for line in Path(f"/proc/{pid}/cgroup").read_text().splitlines():
        _, controllers, path = line.split(":", 2)
        if controllers == "":
            for name in ("memory", "pids", "cpu"):
                found.setdefault(name, Path("/sys/fs/cgroup") / path.lstrip("/"))
        for name in controllers.split(","):
            if name in ("memory", "pids", "cpu", "freezer"):
                found[name] = Path("/sys/fs/cgroup") / name / path.lstrip("/")
    return found


def test_MT_06_sandboxes_get_disjoint_host_uid_ranges(
    runtime_server: RunningServer, runtime_view: RuntimeView, runtime_sandbox: dict[str, Any]
) -> None:
    other = create(runtime_server.url, runtime_server.api_key)
    try:
        bases = []
        for sandbox in (runtime_sandbox, other):
            state = runtime_view.state(sandbox["sandboxID"])
            assert state is not None
            bases.append(int(state["uid_base"]))
            result = run(
                runtime_server.url,
                sandbox["sandboxID"],
                sandbox["envdAccessToken"],
                "sleep 30 & echo $!",
            )
            assert result.exit_code == 0
        assert abs(bases[0] - bases[1]) >= UIDS_PER_SANDBOX
        # Each sandbox's user processes run as its own host uid (base + 1000).
        for base in bases:
            assert any(
                Path(f"/proc/{pid}").stat().st_uid == base + 1000 for pid in _in_uid_range(base)
            )
    finally:
        httpx.delete(
            f"{runtime_server.url}/sandboxes/{other['sandboxID']}",
            headers={"X-API-Key": runtime_server.api_key},
        )


def test_RES_10_kill_leaves_no_process_cgroup_or_mount(
    runtime_server: RunningServer, runtime_view: RuntimeView
) -> None:
    created = create(runtime_server.url, runtime_server.api_key)
    sandbox_id, token = created["sandboxID"], created["envdAccessToken"]
    result = run(
        runtime_server.url,
        sandbox_id,
        token,
        "setsid nohup sleep 1000 >/dev/null 2>&1 & (sleep 1000 &) ; echo started",
    )
    assert result.stdout == "started\n"
    state = runtime_view.state(sandbox_id)
    assert state is not None
    base = int(state["uid_base"])
    assert len(_in_uid_range(base)) >= 4  # monitor, init, guest, sleepers
    response = httpx.delete(
        f"{runtime_server.url}/sandboxes/{sandbox_id}",
        headers={"X-API-Key": runtime_server.api_key},
    )
    assert response.status_code == 204
    assert _in_uid_range(base) == []
    assert not any(Path(p).exists() for p in state["cgroup"])
    assert runtime_view.state(sandbox_id) is None
    assert not Path(f"/run/sandgate-bwrap/stage/{sandbox_id}").exists()
    assert f"/run/sandgate-bwrap/stage/{sandbox_id}" not in Path("/proc/self/mountinfo").read_text()
    assert not Path(f"/run/sandgate-bwrap/uids/{state['slot']}").exists()
