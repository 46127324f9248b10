"""Host-side posture of bwrap sandboxes (security.md ESC-01, MT-06, RES-10), read from /proc and
the cgroup tree and compared with what runtimes/bwrap.py promises."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import httpx
import pytest

from sandgate.runtimes.bwrap import UID_BASE, UIDS_PER_SANDBOX
from tests.fixtures.runtimes import RuntimeView
from tests.fixtures.server import RunningServer
from tests.framework.envd import create, run
from tests.framework.posture import DEFAULT_MEMORY_LIMIT, proc_status, process_tree, started

pytestmark = pytest.mark.parametrize("runtime", ["bwrap"], indirect=True)

MIB = 1024 * 1024


def _processes(view: RuntimeView, sandbox_id: str) -> list[int]:
    """The sandbox's live (not zombie: the host's init reaps bubblewrap's monitor when it gets
    to it) processes: bubblewrap's monitor and everything under it."""
    state = view.state(sandbox_id)
    assert state is not None
    return [pid for pid in process_tree(int(state["monitor_pid"])) if started(pid) is not None]


def test_ESC_01_bwrap_moving_parts(
    runtime_view: RuntimeView, runtime_sandbox: dict[str, Any]
) -> None:
    """bubblewrap's monitor (outside the sandbox) and the sandbox's cgroup."""
    sandbox_id = runtime_sandbox["sandboxID"]
    state = runtime_view.state(sandbox_id)
    assert state is not None
    guest = runtime_view.init_pid(sandbox_id)
    base = int(state["uid_base"])
    assert base >= UID_BASE and (base - UID_BASE) % UIDS_PER_SANDBOX == 0
    assert Path(f"/proc/{guest}/gid_map").read_text().split() == ["0", str(base), "65536"]
    # The guest's log is on the sandbox's own disk, not on the host's.
    fds = {int(fd.name): os.readlink(fd) for fd in Path(f"/proc/{guest}/fd").iterdir()}
    assert fds[0] == fds[1] == "/dev/null"
    assert fds[2] == f"/run/sandgate-rt/stage/{sandbox_id}/disk/log/guest.log"

    cgroup = _cgroup_dirs(guest)
    assert cgroup["pids"].name == sandbox_id
    if (cgroup["memory"] / "memory.limit_in_bytes").exists():
        assert int((cgroup["memory"] / "memory.limit_in_bytes").read_text()) == (
            DEFAULT_MEMORY_LIMIT
        )
        assert int((cgroup["cpu"] / "cpu.cfs_quota_us").read_text()) == 100000
    else:
        assert (cgroup["memory"] / "memory.swap.max").read_text().strip() == "0"
        assert (cgroup["cpu"] / "cpu.max").read_text().split() == ["100000", "100000"]
    # bubblewrap's monitor is in the same cgroup, runs as the same uid and holds nothing.
    monitor = int(state["monitor_pid"])
    assert str(monitor) in (cgroup["pids"] / "cgroup.procs").read_text().split()
    assert proc_status(monitor)["Uid"].split()[0] == str(base)
    assert int(proc_status(monitor)["CapEff"], 16) == 0
    assert proc_status(monitor)["NoNewPrivs"] == "1"


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
        sandboxes = (runtime_sandbox, other)
        for sandbox in sandboxes:
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
        for base, sandbox in zip(bases, sandboxes, strict=True):
            processes = _processes(runtime_view, sandbox["sandboxID"])
            assert any(Path(f"/proc/{pid}").stat().st_uid == base + 1000 for pid in processes)
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
    assert runtime_view.uid_claims(sandbox_id) == [state["slot"]]
    # Its processes, by pid and start time (a pid may be used again at once by other work, so
    # it is these processes that must be gone).
    before = {pid: started(pid) for pid in _processes(runtime_view, sandbox_id)}
    assert all(
        base <= Path(f"/proc/{pid}").stat().st_uid < base + UIDS_PER_SANDBOX for pid in before
    )
    assert len(before) >= 4  # monitor, guest, sleepers (the file worker starts on demand)
    response = httpx.delete(
        f"{runtime_server.url}/sandboxes/{sandbox_id}",
        headers={"X-API-Key": runtime_server.api_key},
    )
    assert response.status_code == 204
    assert [pid for pid, start in before.items() if started(pid) == start] == []
    assert not any(Path(p).exists() for p in state["cgroup"])
    assert runtime_view.state(sandbox_id) is None
    assert not Path(f"/run/sandgate-rt/stage/{sandbox_id}").exists()
    assert f"/run/sandgate-rt/stage/{sandbox_id}" not in Path("/proc/self/mountinfo").read_text()
    assert runtime_view.uid_claims(sandbox_id) == []  # its slot may be another's already
