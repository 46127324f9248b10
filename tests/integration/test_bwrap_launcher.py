"""What starts bubblewrap (``runtimes/bwrap._launcher_argv``), run for real on this host's
cgroups with a plain command in bubblewrap's place; and the open-files limit it sets, refused
with what to do when this host will not give it.

The launcher must, before the command runs: lower the rlimits, put itself into the sandbox's
cgroup where the kernel lets a process do that without the global lock (v1), drop to the
range's first uid with no groups, and become the command (one program replacing the next), in a
session of its own. Anything it cannot do must stop it before the command runs.
"""

from __future__ import annotations

import json
import os
import resource
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from sandgate.runtimes._cgroups import CgroupLimits, SandboxCgroup, detect
from sandgate.runtimes._uids import UID_BASE
from sandgate.runtimes.bwrap import _launcher_argv, nofile_problem, start_launcher
from tests.fixtures.runtimes import runtime_env
from tests.fixtures.server import ServerFactory
from tests.framework.envd import run

pytestmark = pytest.mark.bwrap

#: Below every sandbox's range and the runtime's probe uid: no process of a sandbox has it.
UID = UID_BASE - 3
NOFILE = 333
#: Prints what the command was started with: ids, groups, limits, session, its pid.
PROBE = (
    'echo "$(id -u) $(id -g) [$(id -G)] $(ulimit -Sn) $(ulimit -Hn) $(ulimit -c) '
    '$(cut -d" " -f6 /proc/self/stat) $$"; exec >/dev/null; '
)


def _launch(join_files: list[Path], command: str) -> tuple[subprocess.Popen[bytes], str]:
    """Starts the launcher as the runtime does, with ``sh -c command`` as the program it
    starts; returns it and what the command wrote to its standard output, which the launcher
    passes on (empty if it never ran), read until the command closed it."""
    read_end, write_end = os.pipe()
    try:
        launcher = start_launcher(
            _launcher_argv(NOFILE, UID, join_files, ["/bin/sh", "-c", command]),
            stdout=write_end,
        )
        os.close(write_end)
        write_end = -1
        chunks = []
        while chunk := os.read(read_end, 4096):
            chunks.append(chunk)
        return launcher, b"".join(chunks).decode()
    finally:
        os.close(read_end)
        if write_end >= 0:
            os.close(write_end)


@pytest.fixture
def cgroup() -> Iterator[SandboxCgroup]:
    group = SandboxCgroup(detect(), f"test-launch-{os.getpid()}")
    group.create(CgroupLimits(memory_bytes=256 * 1024 * 1024, pids=32, cpus=1))
    yield group
    group.kill_all()
    group.remove()


def test_the_launcher_joins_the_cgroup_lowers_limits_and_drops_ids_before_the_command(
    cgroup: SandboxCgroup,
) -> None:
    join_files = cgroup.join_files()
    if cgroup.host.version == 2:
        # v2 moves whole processes only: the runtime moves the launcher from outside.
        assert join_files == []
        return
    assert [path.name for path in join_files] == ["tasks"] * len(cgroup.paths)
    launcher, out = _launch(join_files, PROBE + "exec sleep 300")
    try:
        uid, gid, groups, soft, hard, core, session, pid = out.split()
        assert (uid, gid, groups) == (str(UID), str(UID), f"[{UID}]")
        assert (soft, hard, core) == (str(NOFILE), str(NOFILE), "0")
        # One program replacing the next: the command is the launcher's own process (the
        # runtime's bubblewrap monitor), in a session of its own (it leads it): not the
        # caller's, no terminal of the caller's.
        assert int(pid) == launcher.pid
        assert session == pid and int(session) != os.getsid(0)
        # Born inside the sandbox's cgroup in every hierarchy: nobody moved it.
        assert cgroup.holds(int(pid))
        assert int(pid) in cgroup.pids()
        assert not cgroup.holds(os.getpid())
    finally:
        launcher.kill()
        launcher.wait(timeout=30)


def test_a_launcher_that_cannot_join_the_cgroup_runs_nothing(
    cgroup: SandboxCgroup, tmp_path: Path
) -> None:
    if cgroup.host.version == 2:
        assert cgroup.join_files() == []
        return
    missing = tmp_path / "gone" / "tasks"
    launcher, out = _launch([*cgroup.join_files(), missing], PROBE)
    assert launcher.wait(timeout=30) != 0
    assert out == ""


def test_a_launcher_without_cgroup_files_still_lowers_limits_and_drops_ids() -> None:
    """The v2 form (nothing to join: the runtime moves it from outside)."""
    launcher, out = _launch([], PROBE)
    assert launcher.wait(timeout=30) == 0
    uid, gid, groups, soft, hard, core, *_ = out.split()
    assert (uid, gid, groups, soft, hard, core) == (
        str(UID),
        str(UID),
        f"[{UID}]",
        str(NOFILE),
        str(NOFILE),
        "0",
    )


def _can_raise_limits() -> bool:
    status = Path("/proc/self/status").read_text().splitlines()
    effective = next(line.split()[1] for line in status if line.startswith("CapEff:"))
    return bool(int(effective, 16) >> 24 & 1)  # CAP_SYS_RESOURCE


def test_a_nofile_limit_within_the_gateways_own_is_no_problem() -> None:
    hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    assert nofile_problem(64) is None
    if hard != resource.RLIM_INFINITY:
        assert nofile_problem(hard) is None


def test_a_nofile_limit_the_host_will_not_give_is_refused_with_what_to_do(
    sandgate_server_factory: ServerFactory,
) -> None:
    hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    too_many = (hard if hard != resource.RLIM_INFINITY else 2**20) + 1
    server = sandgate_server_factory(
        extra_env={**runtime_env("bwrap"), "SANDGATE_LIMITS__NOFILE": str(too_many)}
    )
    try:
        response = httpx.post(
            f"{server.url}/v2/sandboxes",
            json={"templateID": "base"},
            headers={"X-API-Key": server.api_key},
            timeout=120,
        )
        if hard == resource.RLIM_INFINITY or _can_raise_limits():
            # This host lets the launcher go above the gateway's own limit: the sandbox has it.
            assert response.status_code == 201, response.text
            sandbox = response.json()
            result = run(server.url, sandbox["sandboxID"], sandbox["envdAccessToken"], "ulimit -n")
            assert result.stdout.strip() == str(too_many)
            return
        assert response.status_code == 503, response.text
        body = response.json()
        assert body["error_code"] == "runtime_unavailable"
        assert f"limits.nofile is {too_many}" in body["message"]
        assert "LimitNOFILE" in body["message"]
        # Refused before anything was made: the server holds no sandbox.
        listed = httpx.get(
            f"{server.url}/sandboxes", headers={"X-API-Key": server.api_key}, timeout=30
        )
        assert listed.json() == []
    finally:
        server.stop()


def _zombies(pid: int) -> set[int]:
    """The children of ``pid`` that have ended and were not reaped."""
    found = set()
    for task in Path(f"/proc/{pid}/task").iterdir():
        for child in (task / "children").read_text().split():
            try:
                stat = Path(f"/proc/{child}/stat").read_text()
            except FileNotFoundError:
                continue
            if stat.rpartition(")")[2].split()[0] == "Z":
                found.add(int(child))
    return found


def test_bubblewraps_monitor_is_reaped_after_a_kill_by_the_api_or_by_another_process(
    sandgate_server_factory: ServerFactory,
) -> None:
    """bubblewrap's monitor is the gateway's own child (the launcher execs into it): a kill
    through the API reaps it before it answers; a kill by another process (the CLI) leaves it
    to the reaper's next sweep, which reaps it too. No zombie stays behind either way."""
    server = sandgate_server_factory(
        extra_env={**runtime_env("bwrap"), "SANDGATE_TEMPLATES__WARM_POOL": "{}"}
    )
    headers = {"X-API-Key": server.api_key}
    try:
        assert server.process is not None
        gateway = server.process.pid
        ids = []
        for _ in range(2):
            response = httpx.post(
                f"{server.url}/sandboxes", json={"templateID": "base"}, headers=headers, timeout=120
            )
            assert response.status_code == 201, response.text
            ids.append(response.json()["sandboxID"])
        monitors = {
            sandbox_id: int(
                json.loads((server.home / "bwrap" / sandbox_id / "state.json").read_text())[
                    "monitor_pid"
                ]
            )
            for sandbox_id in ids
        }
        children = {
            int(child)
            for task in Path(f"/proc/{gateway}/task").iterdir()
            for child in (task / "children").read_text().split()
        }
        assert set(monitors.values()) <= children  # the gateway's own, as the runtime says

        by_api, by_cli = ids
        response = httpx.delete(f"{server.url}/sandboxes/{by_api}", headers=headers, timeout=60)
        assert response.status_code == 204, response.text
        assert not Path(f"/proc/{monitors[by_api]}").exists()  # reaped: gone, not a zombie

        server.cli("sandbox", "kill", by_cli)
        deadline = time.monotonic() + 60  # the reaper sweeps every 10 s
        while Path(f"/proc/{monitors[by_cli]}").exists():
            assert time.monotonic() < deadline, "the CLI-killed sandbox's monitor stays a zombie"
            time.sleep(0.2)  # polling the kernel's state, with a deadline
        assert _zombies(gateway) == set()
    finally:
        server.stop()
