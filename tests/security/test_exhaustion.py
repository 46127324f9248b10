"""security.md §2.3 (RES): exhausting resources from inside a sandbox, on every runtime.

A server per runtime with small limits (``LIMITS``) so each attack hits its wall in seconds.
Every test checks the attack stops at the sandbox's own limit with a clear error, and that a
neighbour sandbox (and the gateway) keeps working while it happens.
"""

from __future__ import annotations

import json
import os
import shlex
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx
import pytest

from tests.fixtures.runtimes import RuntimeView
from tests.fixtures.server import RunningServer
from tests.framework.envd import CommandResult, create, run
from tests.framework.sandbox_http import wait_for

LIMITS = {
    "pids_limit": 64,
    "nofile": 256,
    "disk_mib": 192,
    "default_memory_mb": 128,
    "max_ptys": 16,
}
MiB = 1024 * 1024


@pytest.fixture(scope="module")
def small_server(runtime_server_factory: Callable[..., RunningServer]) -> RunningServer:
    return runtime_server_factory(config={"limits": LIMITS})


class Box:
    def __init__(self, server: RunningServer, **body: Any) -> None:
        self.server = server
        self.sandbox = create(server.url, server.api_key, **body)
        self.id = str(self.sandbox["sandboxID"])

    def run(self, command: str, **kwargs: Any) -> CommandResult:
        return run(self.server.url, self.id, self.sandbox["envdAccessToken"], command, **kwargs)

    def python(self, code: str, **kwargs: Any) -> dict[str, Any]:
        """Runs ``code`` (which prints one JSON object last) with python3 in the sandbox."""
        quoted = code.replace("'", "'\\''")
        result = self.run(f"python3 -c '{quoted}'", **kwargs)
        assert result.exit_code == 0, result.stderr
        value: dict[str, Any] = json.loads(result.stdout.strip().splitlines()[-1])
        return value

    def kill(self) -> None:
        httpx.delete(
            f"{self.server.url}/sandboxes/{self.id}",
            headers={"X-API-Key": self.server.api_key},
            timeout=60,
        )


@pytest.fixture
def box(small_server: RunningServer) -> Iterator[Box]:
    sandbox = Box(small_server, timeout=300)
    yield sandbox
    sandbox.kill()


@pytest.fixture
def neighbour(small_server: RunningServer) -> Iterator[Box]:
    sandbox = Box(small_server, timeout=300)
    yield sandbox
    sandbox.kill()


def _neighbour_ok(neighbour: Box) -> None:
    result = neighbour.run("echo ok > /home/user/n && cat /home/user/n")
    assert (result.exit_code, result.stdout) == (0, "ok\n"), result


FORK_BOMB = """
import errno, json, os
r, w = os.pipe()
children, error = [], None
try:
    while len(children) < 10000:
        pid = os.fork()
        if pid == 0:
            os.close(w)
            os.read(r, 1)
            os._exit(0)
        children.append(pid)
except OSError as exc:
    error = errno.errorcode.get(exc.errno, str(exc.errno))
os.close(w)
for pid in children:
    os.waitpid(pid, 0)
print(json.dumps({"forked": len(children), "error": error}))
"""


def test_RES_01_fork_bomb_stops_at_the_pids_limit(box: Box, neighbour: Box) -> None:
    result = box.python(FORK_BOMB)
    assert result["error"] == "EAGAIN", result
    assert result["forked"] < LIMITS["pids_limit"]
    _neighbour_ok(neighbour)
    # The classic shell bomb, left running: the sandbox stays bounded and killable.
    bomb = box.run("(timeout 3 bash -c ':(){ :|:& };:' &) ; sleep 4; echo survived")
    assert bomb.exit_code == 0 or "fork" in bomb.stderr.lower(), bomb
    _neighbour_ok(neighbour)


THREAD_BOMB = """
import json, threading
stop = threading.Event()
threads, error = [], None
try:
    while len(threads) < 10000:
        t = threading.Thread(target=stop.wait)
        t.start()
        threads.append(t)
except RuntimeError as exc:
    error = str(exc)
stop.set()
for t in threads:
    t.join()
print(json.dumps({"threads": len(threads), "error": error}))
"""


def test_RES_02_thread_bomb_meets_the_same_pids_limit(box: Box, neighbour: Box) -> None:
    result = box.python(THREAD_BOMB)
    assert result["error"] == "can't start new thread", result
    assert result["threads"] < LIMITS["pids_limit"]
    _neighbour_ok(neighbour)


def _fill(box: Box, path: str, user: str | None = None) -> tuple[str, int]:
    """dd's output (with ``rc=``) and the size reached."""
    result = box.run(
        f"dd if=/dev/zero of={path} bs=1M count=4096 2>&1; echo rc=$?; stat -c %s {path}",
        user=user,
    )
    return result.stdout, int(result.stdout.split()[-1])


def _stopped(output: str) -> bool:
    return any(why in output for why in ("No space left on device", "File too large", "rc=153"))


def test_RES_04_dev_shm_is_bounded(box: Box) -> None:
    output, size = _fill(box, "/dev/shm/x")
    assert _stopped(output), output
    assert size <= 64 * MiB


def test_RES_05_disk_fill_stops_at_the_sandbox_quota(box: Box, neighbour: Box) -> None:
    # One quota for every path the sandbox writes: home, /tmp and the root layer.
    output, size = _fill(box, "/home/user/big")
    assert _stopped(output), output
    assert size <= LIMITS["disk_mib"] * MiB
    for path, user in (("/tmp/big", None), ("/usr/big", "root")):
        output, more = _fill(box, path, user)
        assert _stopped(output), output
        assert more < MiB, (path, more)  # already full
    assert box.run("echo alive").stdout == "alive\n"  # a full disk is not a dead sandbox
    _neighbour_ok(neighbour)


def test_RES_05_files_larger_than_the_memory_limit_leave_processes_their_memory(
    box: Box,
) -> None:
    # Files live in RAM (tmpfs) but are budgeted on top of memory_mb (memory_limit_bytes).
    written = box.run("head -c 150M /dev/zero > /home/user/data && stat -c %s /home/user/data")
    assert written.stdout.strip() == str(150 * MiB), written
    used = box.run("python3 -c 'x = bytearray(96 * 2**20); print(len(x) >> 20)'")
    assert (used.exit_code, used.stdout) == (0, "96\n"), used


def test_RES_memory_bomb_kills_the_process_not_the_guest(box: Box, neighbour: Box) -> None:
    assert box.run("cat /proc/self/oom_score_adj").stdout == "1000\n"  # the guest runs at 500
    bomb = box.run("python3 -c 'x = [bytearray(2**20) for _ in range(4096)]'")
    assert bomb.exit_code != 0, bomb
    assert box.run("echo alive").stdout == "alive\n"
    _neighbour_ok(neighbour)


INODES = """
import errno, json, os
os.makedirs("/home/user/inodes", exist_ok=True)
count, error = 0, None
try:
    while count < 300000:
        os.close(os.open(f"/home/user/inodes/{count}", os.O_CREAT | os.O_WRONLY, 0o600))
        count += 1
except OSError as exc:
    error = errno.errorcode.get(exc.errno, str(exc.errno))
print(json.dumps({"created": count, "error": error}))
"""


def test_RES_07_inode_exhaustion_is_bounded_by_the_sandbox(
    box: Box, neighbour: Box, small_server: RunningServer
) -> None:
    result = box.python(INODES)
    assert result["error"] in ("ENOSPC", "EDQUOT"), result
    # The inodes were the sandbox's own disk's (its capped tmpfs), not the host disk's: that
    # file system, and no other, is out of them (read from the host, so no host-wide count).
    disk = os.statvfs(f"/run/sandgate-rt/stage/{box.id}/disk")
    assert disk.f_ffree == 0 and disk.f_files == LIMITS["disk_mib"] * 64, disk
    assert result["created"] < disk.f_files
    _neighbour_ok(neighbour)


FDS = """
import errno, json, os
fds, error = [], None
try:
    while len(fds) < 100000:
        fds.append(os.open("/dev/null", os.O_RDONLY))
except OSError as exc:
    error = errno.errorcode.get(exc.errno, str(exc.errno))
print(json.dumps({"opened": len(fds), "error": error}))
"""


def _open_fds(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


def test_RES_08_fd_exhaustion_stops_at_nofile(box: Box, small_server: RunningServer) -> None:
    assert small_server.process is not None
    gateway_before = _open_fds(small_server.process.pid)
    result = box.python(FDS)
    assert result["error"] == "EMFILE", result
    assert result["opened"] <= LIMITS["nofile"]
    assert _open_fds(small_server.process.pid) <= gateway_before + 16
    # The limits every process of the sandbox starts with (soft = hard), and no core dumps.
    limits = box.run("ulimit -Sn; ulimit -Hn; ulimit -Sc; ulimit -Hc").stdout.split()
    assert limits == [str(LIMITS["nofile"])] * 2 + ["0", "0"]


_SUDO_REFUSED_FDS = r"""
import json, os, select, socket, struct
def frame(body, kind=0):
    return struct.pack(">BI", kind, len(body)) + body
requests = {
    "wrong frame kind": frame(b"{}", kind=7),
    "not JSON": frame(b"{"),
    "not an object": frame(b"[1]"),
    "no argv": frame(b'{"env": {}}'),
}
closed = {}
for name, payload in requests.items():
    r, w = os.pipe()
    conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    conn.connect("\0sandgate-sudo")
    socket.send_fds(conn, [payload], [w, w, w])
    os.close(w)
    conn.settimeout(10)
    conn.recv(65536)  # the guest drops the request: end of file
    conn.close()
    # End of file on the pipe once no copy of its write end is open anywhere.
    ready, _, _ = select.select([r], [], [], 10)
    closed[name] = bool(ready) and os.read(r, 1) == b""
print(json.dumps(closed))
"""


def test_RES_08_sudo_requests_the_guest_refuses_leave_no_descriptor_open_in_it(
    box: Box,
) -> None:
    """The service side of RES-08: any process may ask the guest (PID 1) for sudo with three
    descriptors attached; a request it cannot read must not leave them open there, or a
    sandbox could run its own guest out of descriptors."""
    result = box.run(f"python3 -c {shlex.quote(_SUDO_REFUSED_FDS)}")
    assert result.exit_code == 0, result.stderr
    assert json.loads(result.stdout) == {
        "wrong frame kind": True,
        "not JSON": True,
        "not an object": True,
        "no argv": True,
    }


DAEMON = "import os, time; os.fork() or (os.setsid(), os.fork() or time.sleep(1e9))"


def test_RES_10_timeout_kills_everything_including_daemons(
    small_server: RunningServer, runtime: str
) -> None:
    view = RuntimeView(runtime, small_server)
    doomed = Box(small_server, timeout=3)
    try:
        started = doomed.run(
            "sleep 1e9 & setsid nohup sleep 1e9 >/dev/null 2>&1 & "
            f"python3 -c '{DAEMON}' & "
            "echo started"
        )
        assert started.stdout.strip() == "started", started
        init = view.init_pid(doomed.id)
        # Expiry is the reaper's job: wait (bounded) until the runtime no longer knows it.
        wait_for(lambda: not view.exists(doomed.id), 30, "the expired sandbox to be removed")
        wait_for(lambda: _gone(init), 10, "the sandbox's init to be gone")
        info = httpx.get(
            f"{small_server.url}/sandboxes/{doomed.id}",
            headers={"X-API-Key": small_server.api_key},
            timeout=10,
        )
        assert info.status_code == 404
    finally:
        doomed.kill()


def _gone(pid: int) -> bool:
    """Dead, or a zombie its (killed) parent left for the host's init to reap."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] == "Z"
    except FileNotFoundError:
        return True


def test_RES_13_huge_argv_fails_inside_only(box: Box, neighbour: Box) -> None:
    result = box.run(
        "python3 -c \"import os; os.execv('/bin/true', ['x'] * 10**6)\" 2>&1; echo rc=$?"
    )
    assert "Argument list too long" in result.stdout, result.stdout
    assert box.run("echo alive").stdout == "alive\n"
    _neighbour_ok(neighbour)


PTY_HOG = """
import os, sys, time
held = []
for _ in range(3):  # several processes, so a per-process fd limit is not what stops it
    if os.fork() == 0:
        try:
            while len(held) < 5000:
                held.append(os.open("/dev/ptmx", os.O_RDWR | os.O_NOCTTY))
        except OSError:
            pass
        with open(f"/tmp/ptys.{os.getpid()}", "w") as out:
            out.write(str(len(held)))
        time.sleep(600)
        os._exit(0)
"""


def test_RES_14_pty_exhaustion_is_bounded_per_sandbox(box: Box, neighbour: Box) -> None:
    quoted = PTY_HOG.replace("'", "'\\''")
    assert box.run(f"python3 -c '{quoted}' >/dev/null 2>&1 &").exit_code == 0

    def reported() -> list[str] | None:
        counts = box.run("awk 1 /tmp/ptys.* 2>/dev/null").stdout.split()
        return counts if len(counts) == 3 else None

    counts = wait_for(reported, 20, "the PTY hog to report")
    assert sum(int(c) for c in counts) == LIMITS["max_ptys"], counts
    # The sandbox's terminals are the host's, counted in the sandbox's own devpts instance
    # (not the host-wide count, which every other process on the host moves): no more than
    # its limit exist, however the hog asks.
    held = box.run("ls /dev/pts | grep -c '^[0-9]'").stdout.strip()
    assert int(held) <= LIMITS["max_ptys"], held
    # The neighbour still gets terminals while the hog holds every one it may have.
    opened = neighbour.run(
        'python3 -c "import os, pty; m, s = pty.openpty(); print(os.ttyname(s))"'
    )
    assert opened.stdout.startswith("/dev/pts/"), opened


ZOMBIES = """
import os, sys
for _ in range(50):
    if os.fork() == 0:
        os._exit(0)
# exit without reaping: the 50 children are re-parented to the sandbox's init
os._exit(0)
"""


def test_RES_20_orphaned_zombies_are_reaped(box: Box) -> None:
    quoted = ZOMBIES.replace("'", "'\\''")
    assert box.run(f"python3 -c '{quoted}'").exit_code == 0
    count = "grep -l '^State:.*Z' /proc/[0-9]*/status 2>/dev/null | wc -l"
    wait_for(lambda: box.run(count).stdout.strip() == "0", 10, "the zombies to be reaped")


def test_RES_17_sandbox_quota_is_exact_under_a_burst(
    runtime_server_factory: Callable[..., RunningServer], runtime: str
) -> None:
    server = runtime_server_factory(config={"limits": {**LIMITS, "max_sandboxes_per_team": 3}})
    view = RuntimeView(runtime, server)

    def attempt(_: int) -> httpx.Response:
        return httpx.post(
            f"{server.url}/v2/sandboxes",
            json={"templateID": "base", "timeout": 120},
            headers={"X-API-Key": server.api_key},
            timeout=120,
        )

    with ThreadPoolExecutor(8) as pool:
        answers = list(pool.map(attempt, range(8)))
    created = [a.json()["sandboxID"] for a in answers if a.status_code == 201]
    refused = [a for a in answers if a.status_code != 201]
    assert len(created) == 3, [a.text for a in answers]
    assert {a.status_code for a in refused} == {429}
    assert all("limits.max_sandboxes_per_team" in a.json()["message"] for a in refused)
    for sandbox_id in created:
        httpx.delete(
            f"{server.url}/sandboxes/{sandbox_id}",
            headers={"X-API-Key": server.api_key},
            timeout=60,
        )
    listed = httpx.get(
        f"{server.url}/sandboxes", headers={"X-API-Key": server.api_key}, timeout=10
    ).json()
    assert listed == []
    assert not any(view.exists(sandbox_id) for sandbox_id in created)
