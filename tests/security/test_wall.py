"""The hard wall outside (issue 12; security.md §3 revision of 2026-12-01), on every runtime.

Classes proven here: identity (uid 0 inside is never host uid 0, each sandbox's uids are its
own, so per-user kernel limits exhausted in one sandbox leave a neighbour untouched),
host-backed writable paths (bounded, ``nosuid``/``nodev``, the socket directory read-only),
and the guest as a hostage (sandbox root signalling everything it can see never hangs an API
call). Strict input, uploads, policy, floors and egress authority have their own files."""

from __future__ import annotations

import fcntl
import os
import signal
import struct
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from sandgate.runtimes._uids import UID_BASE, UIDS_PER_SANDBOX
from tests.fixtures.runtimes import RuntimeView
from tests.fixtures.server import RunningServer
from tests.framework.envd import create, run
from tests.framework.inside import run_python
from tests.framework.posture import proc_status
from tests.framework.sandbox_http import envelope

STAGE_DIR = Path("/run/sandgate-rt/stage")
_NS_GET_OWNER_UID = 0xB704


def _sh(server: RunningServer, sandbox: dict[str, Any], command: str, **kwargs: Any) -> Any:
    return run(server.url, sandbox["sandboxID"], sandbox.get("envdAccessToken"), command, **kwargs)


def _kill(server: RunningServer, sandbox: dict[str, Any]) -> None:
    httpx.delete(
        f"{server.url}/sandboxes/{sandbox['sandboxID']}", headers={"X-API-Key": server.api_key}
    )


def _host_uid_range(view: RuntimeView, sandbox_id: str) -> int:
    """The first host uid of the sandbox's range, read from its init's uid_map."""
    init = view.init_pid(sandbox_id)
    inside, outside, count = Path(f"/proc/{init}/uid_map").read_text().split()
    assert (inside, count) == ("0", str(UIDS_PER_SANDBOX))
    return int(outside)


# -- class 1: identity ----------------------------------------------------------------------


def test_identity_sandbox_root_is_never_host_root(
    runtime_server: RunningServer, runtime_view: RuntimeView, runtime_sandbox: dict[str, Any]
) -> None:
    sandbox_id = runtime_sandbox["sandboxID"]
    base = _host_uid_range(runtime_view, sandbox_id)
    assert base >= UID_BASE and (base - UID_BASE) % UIDS_PER_SANDBOX == 0
    init = runtime_view.init_pid(sandbox_id)
    # The guest runs as the sandbox's root: host uid ``base``, never 0.
    assert proc_status(init)["Uid"].split() == [str(base)] * 4
    assert proc_status(init)["Gid"].split() == [str(base)] * 4
    assert Path(f"/proc/{init}/gid_map").read_text().split() == ["0", str(base), "65536"]
    # The user namespace's owner is the sandbox's own uid (per-user counts are charged to it).
    fd = os.open(f"/proc/{init}/ns/user", os.O_RDONLY)
    try:
        owner = struct.unpack("I", fcntl.ioctl(fd, _NS_GET_OWNER_UID, b"\0" * 4))[0]
    finally:
        os.close(fd)
    assert owner == base
    inside = _sh(runtime_server, runtime_sandbox, "id -u", user="root")
    assert inside.stdout.strip() == "0"


def test_identity_each_sandbox_has_a_disjoint_uid_range(
    runtime_server: RunningServer, runtime_view: RuntimeView, runtime_sandbox: dict[str, Any]
) -> None:
    other = create(runtime_server.url, runtime_server.api_key)
    try:
        first = _host_uid_range(runtime_view, runtime_sandbox["sandboxID"])
        second = _host_uid_range(runtime_view, other["sandboxID"])
        assert abs(first - second) >= UIDS_PER_SANDBOX
    finally:
        _kill(runtime_server, other)


#: Opens inotify instances until the kernel refuses, reports on the FIFO in argv[1], then
#: holds them for a minute.
_EXHAUST_INOTIFY = (
    "import ctypes, sys, time\n"
    "libc = ctypes.CDLL(None, use_errno=True)\n"
    "held = []\n"
    "while len(held) < 100000:\n"
    "    fd = libc.inotify_init1(0)\n"
    "    if fd < 0: break\n"
    "    held.append(fd)\n"
    "open(sys.argv[1], 'w').write(f'{len(held)}/{ctypes.get_errno()}\\n')\n"
    "time.sleep(60)\n"
)


def test_identity_per_user_kernel_limits_are_per_sandbox(
    runtime_server: RunningServer, runtime_sandbox: dict[str, Any]
) -> None:
    """inotify instances are counted per host uid and per user-namespace owner: exhausting
    them as every user of one sandbox leaves a neighbour's count untouched."""
    # Both users of sandbox A hold all they can get; each reports on a FIFO once it holds
    # them (a blocking read: no polling).
    exhaust = _sh(
        runtime_server,
        runtime_sandbox,
        "mkfifo /tmp/ready-u /tmp/ready-r; "
        'python3 -c "$X" /tmp/ready-u >/dev/null 2>&1 & '
        'sudo python3 -c "$X" /tmp/ready-r >/dev/null 2>&1 & '
        "read u < /tmp/ready-u; read r < /tmp/ready-r; echo $u $r; "
        "python3 -c 'import ctypes; l = ctypes.CDLL(None, use_errno=True); "
        "print(l.inotify_init1(0), ctypes.get_errno())'",
        envs={"X": _EXHAUST_INOTIFY},
    )
    held_user, held_root, fd, errno_ = exhaust.stdout.split()
    assert held_user.endswith("/24") and held_root.endswith("/24"), exhaust  # EMFILE
    assert int(fd) == -1 and int(errno_) == 24, "sandbox A should have no instance left"
    neighbour = create(runtime_server.url, runtime_server.api_key)
    try:
        verdict = run_python(
            runtime_server.url,
            neighbour,
            "out['fds'] = [libc.inotify_init1(0) for _ in range(8)]\n",
        )
        assert all(fd >= 0 for fd in verdict["fds"]), verdict
    finally:
        _kill(runtime_server, neighbour)


# -- class 2: host-backed writable paths ------------------------------------------------------


def test_host_paths_socket_directory_is_read_only_inside(
    runtime_server: RunningServer, runtime_sandbox: dict[str, Any]
) -> None:
    verdict = run_python(
        runtime_server.url,
        runtime_sandbox,
        "attempt('create', lambda: open('/run/sandgate/planted', 'w'))\n"
        "attempt('mkdir', lambda: os.mkdir('/run/sandgate/d'))\n"
        "attempt('replace_guest', lambda: open('/run/sandgate/guest.pyz', 'ab'))\n"
        "attempt('unlink_socket', lambda: os.unlink('/run/sandgate/guest.sock'))\n"
        "s = socket.socket(socket.AF_UNIX)\n"
        "attempt('connect_guest', lambda: s.connect('/run/sandgate/guest.sock'))\n",
        user="root",
    )
    assert verdict["create"] == verdict["mkdir"] == verdict["unlink_socket"] == "EROFS", verdict
    assert verdict["replace_guest"] in ("EROFS", "EACCES"), verdict
    # The guest's socket belongs to host root: nothing inside, its root included, connects.
    assert verdict["connect_guest"] == "EACCES", verdict


def test_host_paths_every_mount_is_nosuid_and_bounded(
    runtime_server: RunningServer, runtime_sandbox: dict[str, Any]
) -> None:
    mounts = _sh(runtime_server, runtime_sandbox, "cat /proc/self/mountinfo").stdout.splitlines()
    by_target = {line.split()[4]: line for line in mounts}
    for target in ("/", "/run/sandgate", "/dev/pts", "/dev/shm"):
        options = by_target[target].split()[5].split(",")
        assert "nosuid" in options, (target, by_target[target])
    for target in ("/", "/run/sandgate", "/dev/shm"):
        assert "nodev" in by_target[target].split()[5].split(","), target
    assert "ro" in by_target["/run/sandgate"].split()[5].split(",")
    assert " - overlay " in by_target["/"]
    assert "max=64" in by_target["/dev/pts"]
    # On the host, the sandbox's disk is a capped tmpfs, nosuid and nodev.
    disk = STAGE_DIR / runtime_sandbox["sandboxID"] / "disk"
    host = next(
        line
        for line in Path("/proc/self/mountinfo").read_text().splitlines()
        if line.split()[4] == str(disk)
    )
    assert "nosuid" in host.split()[5] and "nodev" in host.split()[5]
    assert "tmpfs" in host.split(" - ")[1] and "nr_inodes=" in host.split(" - ")[1]


def test_host_paths_setuid_and_devices_made_inside_are_inert_on_the_host(
    runtime_server: RunningServer, runtime_sandbox: dict[str, Any]
) -> None:
    made = _sh(
        runtime_server,
        runtime_sandbox,
        "cp /bin/sh /tmp/suid && chmod 4755 /tmp/suid && mknod /tmp/dev c 1 3; echo done",
        user="root",
    )
    assert "done" in made.stdout
    assert "Operation not permitted" in made.stderr  # mknod: no CAP_MKNOD
    upper = STAGE_DIR / runtime_sandbox["sandboxID"] / "disk" / "upper" / "tmp"
    assert not (upper / "dev").exists()
    # The setuid file lives only on the sandbox's nosuid tmpfs, owned by its unprivileged root.
    suid = (upper / "suid").stat()
    assert suid.st_uid >= UID_BASE


# -- class 7: the guest as a hostage ----------------------------------------------------------


#: Every other signal (1-31 but KILL and STOP), sent to the guest alone: the attacking shell
#: must survive the ones it would die of to send the next (SIGINT once stopped the guest).
_EVERY_SIGNAL = "for s in $(seq 1 31); do [ $s = 9 ] || [ $s = 19 ] || kill -$s 1; done"


@pytest.mark.parametrize("signal_name", ["KILL", "STOP", "TERM", "every other"])
def test_hostage_signal_everything_then_a_command_runs(
    runtime_server: RunningServer, runtime_sandbox: dict[str, Any], signal_name: str
) -> None:
    # The attacking command may stop or kill itself along with everything else; its own
    # call ends at its timeout, which is the caller's business, not the guest's.
    _sh(
        runtime_server,
        runtime_sandbox,
        _EVERY_SIGNAL
        if signal_name == "every other"
        else f"kill -{signal_name} 1; sudo kill -{signal_name} -1; exit 0",
        user="root",
        timeout_ms=2_000,
    )
    # A guest the signals stopped or killed would answer neither request (each has its own
    # timeout); how fast a live one answers depends on the machine's load.
    after = _sh(runtime_server, runtime_sandbox, "echo alive; cat /etc/hostname")
    files = httpx.get(
        f"{runtime_server.url}/files",
        params={"path": "/etc/hostname"},
        headers={
            "E2b-Sandbox-Id": runtime_sandbox["sandboxID"],
            "E2b-Sandbox-Port": "49983",
            "X-Access-Token": runtime_sandbox.get("envdAccessToken") or "",
        },
        timeout=10,
    )
    assert after.exit_code == 0 and after.stdout.split() == ["alive", "sandbox"], after
    assert files.status_code == 200 and files.text == "sandbox\n"
    info = httpx.get(
        f"{runtime_server.url}/sandboxes/{runtime_sandbox['sandboxID']}",
        headers={"X-API-Key": runtime_server.api_key},
    )
    assert info.json()["state"] == "running"


def test_hostage_guest_memory_is_out_of_reach(
    runtime_server: RunningServer, runtime_sandbox: dict[str, Any]
) -> None:
    verdict = run_python(
        runtime_server.url,
        runtime_sandbox,
        "attempt('mem', lambda: open('/proc/1/mem', 'rb'))\n"
        "attempt('environ', lambda: open('/proc/1/environ', 'rb').read())\n"
        "attempt('fd', lambda: os.readlink('/proc/1/fd/0'))\n",
        user="root",
    )
    assert verdict["mem"] == verdict["environ"] == verdict["fd"] == "EACCES", verdict


def test_hostage_a_dead_guest_is_reported_not_hidden(
    runtime_server: RunningServer, runtime_view: RuntimeView
) -> None:
    """If the guest dies anyway (the host's OOM killer, an operator), calls fail at once with
    a clear error and the sandbox stops being reported as running."""
    sandbox = create(runtime_server.url, runtime_server.api_key)
    sandbox_id = sandbox["sandboxID"]
    os.kill(runtime_view.init_pid(sandbox_id), signal.SIGKILL)
    started = time.monotonic()
    failed = httpx.post(
        f"{runtime_server.url}/process.Process/Start",
        content=envelope({"process": {"cmd": "/bin/true", "args": []}}),
        headers={
            "E2b-Sandbox-Id": sandbox_id,
            "E2b-Sandbox-Port": "49983",
            "X-Access-Token": sandbox["envdAccessToken"],
            "content-type": "application/connect+json",
        },
        timeout=30,
    )
    assert time.monotonic() - started < 5
    assert failed.status_code in (502, 503) or b"unavailable" in failed.content, failed.content
    info = f"{runtime_server.url}/sandboxes/{sandbox_id}"
    headers = {"X-API-Key": runtime_server.api_key}
    deadline = time.monotonic() + 10
    while httpx.get(info, headers=headers).status_code != 404:  # the state catches up
        assert time.monotonic() < deadline, "a sandbox whose guest died is still listed"
        time.sleep(0.1)
