"""Processes through the real daemon: streaming, exit, env, cwd, stdin, PTY, timeouts."""

from __future__ import annotations

import asyncio
import os
import pwd
import signal
import stat
import subprocess
from pathlib import Path

import pytest

from sandgate.guest.client import Ended, GuestError, Output, Started

from .conftest import RunningGuest
from .helpers import collect, is_alive, read_until, rss_kib, run, run_cmd, wait_for_exit

pytestmark = pytest.mark.timeout(60)


def test_ping_and_socket_mode(guest: RunningGuest) -> None:
    reply = run(guest.client.ping())
    assert reply == {"ok": True, "version": 1, "pid": guest.pid}
    st = os.stat(guest.socket_path)
    assert stat.S_ISSOCK(st.st_mode)
    assert stat.S_IMODE(st.st_mode) == 0o600
    assert st.st_uid == 0


def test_output_is_streamed_before_exit(guest: RunningGuest) -> None:
    async def body() -> None:
        stream = await guest.client.spawn(
            "/bin/bash", ["-c", "echo first; read line; echo second $line"], stdin=True
        )
        events = [await anext(stream)]
        assert events == [Started(stream.pid)]
        # "first" must arrive while the process is still blocked on stdin.
        assert b"first\n" in await read_until(stream, b"first\n")
        await guest.client.send_input(b"go\n", pid=stream.pid)
        out, err, end = await collect(stream)
        assert out == b"second go\n"
        assert err == b""
        assert end == Ended(0, True, "exit status 0", None, False)

    run(body())


def test_stdout_and_stderr_are_separate(guest: RunningGuest) -> None:
    out, err, end = run(run_cmd(guest.client, "echo out; echo err >&2"))
    assert (out, err, end.exit_code) == (b"out\n", b"err\n", 0)


def test_exit_codes_and_signals(guest: RunningGuest) -> None:
    _, _, end = run(run_cmd(guest.client, "exit 3"))
    assert end == Ended(3, True, "exit status 3", "exit status 3", False)
    _, _, end = run(run_cmd(guest.client, "kill -TERM $$"))
    assert end == Ended(-1, False, "signal: terminated", "signal: terminated", False)


def test_spawn_missing_binary_is_an_error(guest: RunningGuest) -> None:
    with pytest.raises(GuestError) as info:
        run(guest.client.spawn("/nonexistent/binary"))
    assert info.value.connect == "invalid_argument"


def test_environment_layers(guest: RunningGuest) -> None:
    script = 'echo "$HOME|$USER|$LOGNAME|$SBX_ONLY|$SBX_OVERRIDE|$REQ"; echo "$PATH"'
    out, _, _ = run(run_cmd(guest.client, script, envs={"SBX_OVERRIDE": "request", "REQ": "r"}))
    first, path = out.decode().splitlines()
    assert first == "/root|root|root|sandbox|request|r"
    assert {"/usr/local/bin", "/usr/bin", "/bin", "/usr/sbin", "/sbin"} <= set(path.split(":"))
    # Request envs are scoped to their process.
    out, _, _ = run(run_cmd(guest.client, 'echo "[$REQ]"'))
    assert out == b"[]\n"


def test_cwd_rules(guest: RunningGuest, workdir: Path) -> None:
    out, _, _ = run(run_cmd(guest.client, "pwd", cwd=str(workdir)))
    assert out.decode().strip() == str(workdir)
    out, _, _ = run(run_cmd(guest.client, "pwd"))
    assert out == b"/root\n"
    out, _, _ = run(run_cmd(guest.client, "pwd", cwd="~"))
    assert out == b"/root\n"


@pytest.mark.parametrize("kind", ["missing", "file"])
def test_invalid_cwd(guest: RunningGuest, workdir: Path, kind: str) -> None:
    target = workdir / "nope"
    if kind == "file":
        target.write_text("x")
    with pytest.raises(GuestError) as info:
        run(guest.client.spawn("/bin/true", cwd=str(target)))
    assert info.value.connect == "invalid_argument"
    assert "invalid_cwd" in info.value.message


@pytest.mark.parametrize("cwd", ["/proc/self/fd/3", "/proc/1/root", "/proc", "link-to-proc"])
def test_esc_13_proc_cwd_rejected(guest: RunningGuest, workdir: Path, cwd: str) -> None:
    if cwd == "link-to-proc":
        (workdir / "p").symlink_to("/proc/self/fd")
        cwd = str(workdir / "p")
    with pytest.raises(GuestError) as info:
        run(guest.client.spawn("/bin/true", cwd=cwd))
    assert info.value.connect == "invalid_argument"
    assert "invalid_cwd" in info.value.message


def test_esc_16_no_controlling_tty_without_pty(guest: RunningGuest) -> None:
    out, _, end = run(run_cmd(guest.client, "exec 3</dev/tty && echo has-tty; ps -o sid= -p $$"))
    assert b"has-tty" not in out
    # setsid: the shell is its own session leader.
    sid = int(out.split()[-1])
    assert end.exit_code == 0
    assert sid > 0


def test_timeout_kills_the_process_group(guest: RunningGuest) -> None:
    async def body() -> None:
        stream = await guest.client.spawn(
            "/bin/bash", ["-c", "sleep 300 & echo $!; wait"], timeout_ms=500
        )
        out = await read_until(stream, b"\n")
        grandchild = int(out.split()[0])
        pidfd = os.pidfd_open(grandchild)
        try:
            _, _, end = await collect(stream)
            assert end.timed_out is True
            assert end.exit_code == -1
            assert end.status == "signal: killed"
            assert wait_for_exit(grandchild, 10)
            assert not is_alive(grandchild)
        finally:
            os.close(pidfd)

    run(body())


def test_stdin_input_and_close(guest: RunningGuest) -> None:
    async def body() -> None:
        stream = await guest.client.spawn("/bin/cat", stdin=True)
        await guest.client.send_input(b"hello ", pid=stream.pid)
        await guest.client.send_input(b"world", pid=stream.pid)
        assert await read_until(stream, b"hello world") == b"hello world"
        with pytest.raises(GuestError) as info:
            await guest.client.send_input(b"x", pid=stream.pid, pty=True)
        assert info.value.connect == "failed_precondition"
        await guest.client.close_stdin(pid=stream.pid)
        _, _, end = await collect(stream)
        assert end.exit_code == 0

    run(body())


def test_send_input_without_stdin_fails(guest: RunningGuest) -> None:
    async def body() -> None:
        stream = await guest.client.spawn("/bin/sleep", ["30"])
        try:
            with pytest.raises(GuestError) as info:
                await guest.client.send_input(b"x", pid=stream.pid)
            assert info.value.connect == "failed_precondition"
            with pytest.raises(GuestError) as info:
                await guest.client.close_stdin(pid=stream.pid)
            assert info.value.connect == "failed_precondition"
            with pytest.raises(GuestError) as info:
                await guest.client.resize(80, 24, pid=stream.pid)
            assert info.value.connect == "invalid_argument"
        finally:
            await guest.client.signal(signal.SIGKILL, pid=stream.pid)
            await collect(stream)

    run(body())


def test_pty_size_resize_and_exit(guest: RunningGuest) -> None:
    async def body() -> None:
        stream = await guest.client.spawn(
            "/bin/sh", ["-i"], pty=(100, 30), envs={"PS1": "$ ", "TERM": "xterm"}
        )
        await guest.client.send_input(b"stty size; tty\n", pid=stream.pid, pty=True)
        seen = bytearray()
        await read_until(stream, b"30 100", seen)
        await read_until(stream, b"/dev/pts/", seen)
        await guest.client.resize(120, 40, pid=stream.pid)
        await guest.client.send_input(b"stty size\n", pid=stream.pid, pty=True)
        await read_until(stream, b"40 120")
        with pytest.raises(GuestError) as info:
            await guest.client.send_input(b"x", pid=stream.pid, pty=False)
        assert info.value.connect == "failed_precondition"
        with pytest.raises(GuestError) as info:
            await guest.client.close_stdin(pid=stream.pid)
        assert info.value.connect == "failed_precondition"
        await guest.client.send_input(b"exit 0\n", pid=stream.pid, pty=True)
        _, err, end = await collect(stream)
        assert end.exit_code == 0
        assert err == b""

    run(body())


def test_pty_output_frames(guest: RunningGuest) -> None:
    async def body() -> None:
        stream = await guest.client.spawn(
            "/bin/sh", ["-c", "head -c 100000 /dev/zero | tr '\\0' a"], pty=(80, 24)
        )
        sizes: list[int] = []
        kinds: set[str] = set()
        async for event in stream:
            if isinstance(event, Output):
                sizes.append(len(event.data))
                kinds.add(event.stream)
            elif isinstance(event, Ended):
                assert event.exit_code == 0
        assert kinds == {"pty"}
        assert max(sizes) <= 16 * 1024
        assert sum(sizes) >= 100000

    run(body())


def test_connect_running_and_survives_disconnect(guest: RunningGuest) -> None:
    async def body() -> None:
        first = await guest.client.spawn("/bin/cat", stdin=True, tag="cat-connect")
        pid = first.pid
        second = await guest.client.connect_process(pid=pid)
        assert await anext(second) == Started(pid)
        await guest.client.send_input(b"one\n", pid=pid)
        assert await read_until(first, b"one\n") == b"one\n"
        assert await read_until(second, b"one\n") == b"one\n"
        await first.aclose()  # unsubscribes only
        assert pid in [p.pid for p in await guest.client.list_processes()]
        third = await guest.client.connect_process(tag="cat-connect")
        assert third.pid == pid
        await guest.client.send_input(b"two\n", pid=pid)
        await guest.client.close_stdin(pid=pid)
        out2, _, end2 = await collect(second)
        out3, _, end3 = await collect(third)
        assert out2 == b"two\n" and out3 == b"two\n"
        assert end2.exit_code == end3.exit_code == 0

    run(body())


def test_connect_recently_exited_and_unknown(guest: RunningGuest) -> None:
    async def body() -> None:
        stream = await guest.client.spawn("/bin/bash", ["-c", "exit 7"])
        _, _, end = await collect(stream)
        again = await guest.client.connect_process(pid=stream.pid)
        events = [event async for event in again]
        assert events == [Started(stream.pid), end]
        with pytest.raises(GuestError) as info:
            await guest.client.connect_process(pid=2**22 + 12345)
        assert info.value.connect == "not_found"
        with pytest.raises(GuestError) as info:
            await guest.client.connect_process(tag="no-such-tag")
        assert info.value.connect == "not_found"

    run(body())


def test_signal_and_list(guest: RunningGuest) -> None:
    async def body() -> None:
        stream = await guest.client.spawn(
            "/bin/sleep", ["300"], tag="sleeper", envs={"A": "1"}, cwd="/tmp"
        )
        infos = {p.pid: p for p in await guest.client.list_processes()}
        info = infos[stream.pid]
        assert (info.tag, info.cmd, info.args, info.envs, info.cwd, info.pty) == (
            "sleeper",
            "/bin/sleep",
            ["300"],
            {"A": "1"},
            "/tmp",
            False,
        )
        await guest.client.signal(signal.SIGKILL, tag="sleeper")
        _, _, end = await collect(stream)
        assert end == Ended(-1, False, "signal: killed", "signal: killed", False)
        assert stream.pid not in [p.pid for p in await guest.client.list_processes()]
        with pytest.raises(GuestError) as err:
            await guest.client.signal(signal.SIGKILL, pid=stream.pid)
        assert err.value.connect == "not_found"
        with pytest.raises(GuestError) as err:
            await guest.client.signal(signal.SIGKILL, pid=2**22 + 54321)
        assert err.value.connect == "not_found"

    run(body())


def test_unknown_user_is_unauthenticated(guest: RunningGuest) -> None:
    with pytest.raises(GuestError) as info:
        run(guest.client.spawn("/bin/true", user="no_such_user_x"))
    assert (info.value.connect, info.value.message) == (
        "unauthenticated",
        "invalid username: 'no_such_user_x'",
    )


def test_max_processes(start_guest) -> None:  # type: ignore[no-untyped-def]
    small = start_guest({"default_user": "root", "max_processes": 2})

    async def body() -> None:
        streams = [await small.client.spawn("/bin/sleep", ["300"]) for _ in range(2)]
        with pytest.raises(GuestError) as info:
            await small.client.spawn("/bin/true")
        assert info.value.connect == "resource_exhausted"
        for stream in streams:
            await small.client.signal(signal.SIGKILL, pid=stream.pid)
            await collect(stream)
        _, _, end = await collect(await small.client.spawn("/bin/true"))
        assert end.exit_code == 0

    run(body())


def test_flood_completes_with_bounded_memory(guest: RunningGuest) -> None:
    before = rss_kib(guest.pid)

    async def body() -> int:
        stream = await guest.client.spawn("/bin/bash", ["-c", "yes | head -c 50000000"])
        total = 0
        biggest = 0
        async for event in stream:
            if isinstance(event, Output):
                total += len(event.data)
                biggest = max(biggest, len(event.data))
            elif isinstance(event, Ended):
                assert event.exit_code == 0
        assert biggest <= 32 * 1024
        return total

    assert run(body()) == 50_000_000
    assert rss_kib(guest.pid) - before < 40 * 1024


def test_daemon_has_no_threads(guest: RunningGuest) -> None:
    run(run_cmd(guest.client, "true"))
    assert os.listdir(f"/proc/{guest.pid}/task") == [str(guest.pid)]


def test_stalled_subscriber_pauses_the_process_not_the_memory(guest: RunningGuest) -> None:
    size = 100_000_000

    async def body() -> None:
        stream = await guest.client.spawn("/usr/bin/head", ["-c", str(size), "/dev/zero"])
        before = rss_kib(guest.pid)
        assert await anext(stream) == Started(stream.pid)
        # Not reading for a while: the guest must stop reading the pipe instead of buffering
        # (the sleep creates the stall; the assertions hold however long it lasts).
        await asyncio.sleep(1.0)
        assert rss_kib(guest.pid) - before < 16 * 1024
        assert stream.pid in [p.pid for p in await guest.client.list_processes()]
        total = 0
        async for event in stream:
            if isinstance(event, Output):
                total += len(event.data)
            elif isinstance(event, Ended):
                assert event.exit_code == 0
        assert total == size

    run(body())


def test_children_inherit_only_stdio(guest: RunningGuest) -> None:
    out, _, _ = run(collect_spawn(guest, "/bin/ls", ["/proc/self/fd"]))
    assert sorted(int(fd) for fd in out.split()) == [0, 1, 2, 3]  # 3: ls's own directory fd


async def collect_spawn(
    guest: RunningGuest, cmd: str, args: list[str]
) -> tuple[bytes, bytes, Ended]:
    return await collect(await guest.client.spawn(cmd, args))


def test_a_users_new_group_is_seen_by_the_next_command(
    guest: RunningGuest, test_user: pwd.struct_passwd
) -> None:
    """The daemon remembers users between commands (``_users.lookup_user``) only while
    ``/etc/passwd`` and ``/etc/group`` stay as they were."""
    group = f"sgg{os.getpid()}"
    subprocess.run(["groupdel", group], capture_output=True, check=False)

    def groups() -> list[str]:
        out, _, end = run(run_cmd(guest.client, "id -Gn", user=test_user.pw_name))
        assert end.exit_code == 0
        return out.decode().split()

    assert group not in groups()
    assert groups() == groups()  # remembered: the same answer
    subprocess.run(["groupadd", group], check=True)
    try:
        subprocess.run(["usermod", "-aG", group, test_user.pw_name], check=True)
        assert group in groups()
    finally:
        subprocess.run(["groupdel", group], capture_output=True, check=False)
    assert group not in groups()
