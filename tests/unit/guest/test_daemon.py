"""The daemon as a whole: users, tunnels, robustness, and the zipapp it ships in."""

from __future__ import annotations

import asyncio
import json
import os
import pwd
import shutil
import socket
import sys
import tempfile
import zipfile
from pathlib import Path

import pytest

from sandgate.guest import build_zipapp
from sandgate.guest.client import GuestClient, GuestError, GuestUnavailable
from sandgate.guest.protocol import FRAME_HEADER, Kind, encode_frame, encode_json

from .conftest import RunningGuest
from .helpers import probe_guest_pyz, run, run_cmd

pytestmark = pytest.mark.timeout(60)


def test_processes_and_files_run_as_the_selected_user(
    guest: RunningGuest, test_user: pwd.struct_passwd, workdir: Path
) -> None:
    name = test_user.pw_name
    secret = workdir / "root-only"
    secret.write_text("secret")
    os.chmod(secret, 0o600)

    async def body() -> None:
        out, _, end = await run_cmd(
            guest.client, 'id -u; id -g; echo "$HOME|$USER"; pwd', user=name
        )
        assert end.exit_code == 0
        assert out.decode().split() == [
            str(test_user.pw_uid),
            str(test_user.pw_gid),
            f"{test_user.pw_dir}|{name}",
            test_user.pw_dir,
        ]
        entry = await guest.client.write_file("made-by-user.txt", b"u", user=name)
        assert (entry.path, entry.owner) == (f"{test_user.pw_dir}/made-by-user.txt", name)
        assert os.stat(entry.path).st_uid == test_user.pw_uid
        made = await guest.client.make_dir("~/d1/d2", user=name)
        assert made.owner == name
        with pytest.raises(GuestError) as info:
            await guest.client.read_file(str(secret), user=name)
        assert info.value.connect == "permission_denied"
        with pytest.raises(GuestError) as info:
            await guest.client.write_file("/root/forbidden.txt", b"x", user=name)
        assert info.value.connect == "permission_denied"
        assert not Path("/root/forbidden.txt").exists()
        with pytest.raises(GuestError) as info:
            await guest.client.remove(str(secret), user=name)
        assert info.value.connect == "permission_denied"
        assert secret.exists()
        # Root, through the same daemon, still can.
        reader = await guest.client.read_file(str(secret))
        assert await reader.read_all() == b"secret"

    run(body())


def test_worker_holds_no_effective_privilege(
    guest: RunningGuest, test_user: pwd.struct_passwd
) -> None:
    """The worker acts as the user: no effective capability, real/effective/file-system ids
    the user's. Its saved uid stays root (``_dirs.make_dirs`` makes a directory the user may
    not create, as E2B's envd does), which gives it nothing until it asks."""
    run(guest.client.stat("~", user=test_user.pw_name))  # make sure the worker exists
    workers = []
    with open(f"/proc/{guest.pid}/task/{guest.pid}/children") as f:
        for pid in f.read().split():
            status = Path(f"/proc/{pid}/status").read_text()
            fields = dict(line.split(":", 1) for line in status.splitlines() if ":" in line)
            if fields["Uid"].split()[0] == str(test_user.pw_uid):
                workers.append(fields)
    assert len(workers) == 1
    assert workers[0]["CapEff"].strip() == "0000000000000000"
    real, effective, saved, fs = workers[0]["Uid"].split()
    assert real == effective == fs == str(test_user.pw_uid) and saved == "0"


def test_make_dir_where_only_root_may_gives_the_directory_to_the_user(
    guest: RunningGuest, test_user: pwd.struct_passwd
) -> None:
    """E2B's envd semantics: a missing directory under a root-owned parent is created and
    given to the requesting user; what already exists keeps its owner."""
    root_owned = Path(tempfile.mkdtemp(prefix="sg-rootdir-", dir="/tmp"))
    root_owned.chmod(0o755)
    target = root_owned / "workspace" / "deep"
    entry = run(guest.client.make_dir(str(target), user=test_user.pw_name))
    assert entry.owner == test_user.pw_name
    for path in (root_owned / "workspace", target):
        assert path.stat().st_uid == test_user.pw_uid
    assert root_owned.stat().st_uid == 0  # what existed is untouched
    with pytest.raises(GuestError) as refused:
        run(guest.client.make_dir(str(target), user=test_user.pw_name))
    assert refused.value.connect == "already_exists"
    shutil.rmtree(root_owned)


def test_tunnel_to_local_port(guest: RunningGuest) -> None:
    async def body() -> None:
        async def echo(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            while data := await reader.read(65536):
                writer.write(data.upper())
                await writer.drain()
            writer.close()

        server = await asyncio.start_server(echo, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        async with server:
            reader, writer = await guest.client.tunnel(port)
            writer.write(b"hello tunnel")
            assert await reader.readexactly(12) == b"HELLO TUNNEL"
            big = os.urandom(1024 * 1024).hex().lower().encode()
            writer.write(big)
            assert await reader.readexactly(len(big)) == big.upper()
            writer.write_eof()
            assert await reader.read() == b""
            writer.close()
        free = socket.socket()
        free.bind(("127.0.0.1", 0))
        closed_port = free.getsockname()[1]
        free.close()
        with pytest.raises(GuestError) as info:
            await guest.client.tunnel(closed_port)
        assert (info.value.connect, info.value.message) == ("unavailable", "port is not open")

    run(body())


def test_tunnel_waits_for_its_port_when_asked(guest: RunningGuest) -> None:
    """``wait_s``: the guest keeps trying a port until it accepts (a template's ready port
    is waited for in the sandbox), and answers ``unavailable`` only once the time is up."""

    async def body() -> None:
        reserved = socket.socket()
        reserved.bind(("127.0.0.1", 0))  # bound, not listening: connects are refused
        reserved.setblocking(False)
        port = reserved.getsockname()[1]
        try:
            loop = asyncio.get_running_loop()
            asked = loop.time()
            with pytest.raises(GuestError) as info:
                await guest.client.tunnel(port, wait_s=0.3)
            assert info.value.connect == "unavailable"
            assert loop.time() - asked >= 0.3  # it kept trying, not answered at once
            waiting = asyncio.create_task(guest.client.tunnel(port, wait_s=10))
            reserved.listen()
            reader, writer = await waiting
            accepted, _ = await loop.sock_accept(reserved)
            accepted.sendall(b"ready")
            assert await reader.readexactly(5) == b"ready"
            accepted.close()
            writer.close()
        finally:
            reserved.close()

    run(body())
    for bad in (-1, 10.5, True, "1", None):
        reply = _raw(guest, encode_json({"op": "tunnel", "port": 1, "wait_s": bad}))
        assert json.loads(reply[FRAME_HEADER.size :])["code"] == "invalid_argument", bad


def _raw(guest: RunningGuest, data: bytes) -> bytes:
    with socket.socket(socket.AF_UNIX) as s:
        s.settimeout(10)
        s.connect(str(guest.socket_path))
        s.sendall(data)
        s.shutdown(socket.SHUT_WR)
        chunks = []
        try:
            while chunk := s.recv(65536):
                chunks.append(chunk)
        except ConnectionResetError:
            chunks.append(b"<reset>")  # closed with our bytes unread: also "closed"
        return b"".join(chunks)


@pytest.mark.parametrize(
    "garbage",
    [
        b"",
        b"\x00\x00",
        FRAME_HEADER.pack(Kind.JSON, 2**31) + b"x",
        encode_frame(Kind.JSON, b"not json"),
        encode_frame(Kind.JSON, b"[1, 2]"),
        encode_frame(Kind.DATA, b"{}"),
    ],
)
def test_malformed_requests_close_only_their_connection(
    guest: RunningGuest, garbage: bytes
) -> None:
    assert _raw(guest, garbage) in (b"", b"<reset>")
    assert run(guest.client.ping())["pid"] == guest.pid


def test_bad_requests_get_error_replies(guest: RunningGuest) -> None:
    reply = _raw(guest, encode_json({"op": "format_disk"}))
    assert json.loads(reply[FRAME_HEADER.size :])["code"] == "unimplemented"
    reply = _raw(guest, encode_json({"op": "spawn", "cmd": 42}))
    assert json.loads(reply[FRAME_HEADER.size :])["code"] == "invalid_argument"
    reply = _raw(guest, encode_json({"op": "signal", "pid": "x", "signal": 9}))
    assert json.loads(reply[FRAME_HEADER.size :])["code"] == "invalid_argument"
    reply = _raw(guest, encode_json({"op": "stat", "path": 7}))
    assert json.loads(reply[FRAME_HEADER.size :])["code"] == "invalid_argument"
    assert run(guest.client.ping())["ok"] is True


@pytest.mark.parametrize(
    "member",
    [
        b', "path": "%s-b"',  # a duplicate of the key the operation reads
        b', "x": NaN',
        b', "x": 1' + b"0" * 5000,
        b', "x": ' + b"[" * 100 + b"]" * 100,
        b', "x": "\xff"',
    ],
)
def test_strict_guest_refuses_a_request_that_is_not_strict_json(
    guest: RunningGuest, workdir: Path, member: bytes
) -> None:
    """The guest decodes its requests with ``sandgate.strictjson``: nothing is acted on and
    only this connection closes."""
    target = str(workdir / "strict-dir").encode()
    payload = b'{"op": "make_dir", "path": "%s"%s}' % (target, member.replace(b"%s", target))
    assert _raw(guest, encode_frame(Kind.JSON, payload)) in (b"", b"<reset>")
    assert not list(workdir.iterdir()), "the guest acted on a refused request"
    assert run(guest.client.ping())["ok"] is True


def test_strict_guest_replies_keep_surrogate_escaped_names(
    guest: RunningGuest, workdir: Path
) -> None:
    """Names that are not UTF-8 travel as lone surrogates, the one relaxation of the rule."""
    with open(os.path.join(os.fsencode(workdir), b"odd\xff"), "wb"):
        pass
    names = {entry.name for entry in run(guest.client.list_dir(str(workdir), depth=1))}
    assert names == {"odd\udcff"}


def test_strict_gateway_refuses_a_guest_reply_that_is_not_strict_json(tmp_path: Path) -> None:
    """A reply with a duplicate key (the sandbox's word against itself) is not believed."""
    path = tmp_path / "fake.sock"

    async def scenario() -> None:
        async def reply(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            await reader.read(FRAME_HEADER.size)
            writer.write(encode_frame(Kind.JSON, b'{"ok": true, "pid": 1, "pid": 2}'))
            await writer.drain()
            writer.close()

        server = await asyncio.start_unix_server(reply, path=str(path))
        async with server:
            with pytest.raises(GuestUnavailable, match="duplicate key"):
                await GuestClient(path).ping()

    asyncio.run(scenario())


def test_envs(guest: RunningGuest, sandbox_envs: dict[str, str]) -> None:
    assert run(guest.client.envs()) == sandbox_envs


def test_unavailable_socket(tmp_path: Path) -> None:
    with pytest.raises(GuestUnavailable) as info:
        run(GuestClient(tmp_path / "missing.sock").ping())
    assert info.value.connect == "unavailable"


def test_daemon_exits_on_sigterm(start_guest) -> None:  # type: ignore[no-untyped-def]
    running = start_guest({"default_user": "root"})
    stream = run(running.client.ping())
    assert stream["ok"]
    running.process.terminate()
    assert running.process.wait(10) == 0


def test_zipapp_is_deterministic_and_rewritten_only_on_change(tmp_path: Path) -> None:
    first = build_zipapp(tmp_path / "a" / "guest.pyz")
    second = build_zipapp(tmp_path / "b" / "guest.pyz")
    assert first.read_bytes() == second.read_bytes()
    inode = first.stat().st_ino
    os.utime(first, (1, 1))
    build_zipapp(first)
    assert (first.stat().st_ino, first.stat().st_mtime) == (inode, 1)
    first.write_bytes(b"stale")
    build_zipapp(first)
    assert first.read_bytes() == second.read_bytes()
    # An archive of other sources (an upgrade: its comment names them) is rebuilt.
    with zipfile.ZipFile(first, "a") as archive:
        archive.comment = b"sandgate-guest 0000"
    build_zipapp(first)
    assert first.read_bytes() == second.read_bytes()
    assert zipfile.ZipFile(first).comment.startswith(b"sandgate-guest ")
    names = zipfile.ZipFile(first).namelist()
    assert names[0] == "__main__.py"
    assert {
        "sandgate/__init__.py",
        "sandgate/guest/daemon.py",
        "sandgate/guest/protocol.py",
    } <= set(names)
    assert all(
        info.date_time == (1980, 1, 1, 0, 0, 0) for info in zipfile.ZipFile(first).infolist()
    )


def test_guest_modules_are_stdlib_only(guest_pyz: Path) -> None:
    probe = (
        "import sys; sys.path.insert(0, sys.argv[1]);"
        "import sandgate.guest.daemon, sandgate.guest._inotify;"
        "print('\\n'.join(sorted(sys.modules)))"
    )
    out = probe_guest_pyz(guest_pyz, probe).split()
    outside = [
        m
        for m in out
        if m.split(".")[0] not in sys.stdlib_module_names
        and m.split(".")[0] not in ("sandgate", "__main__")
    ]
    assert outside == []
    assert "sandgate.guest.client" not in out


def test_zipapp_leaves_out_what_only_the_gateway_runs(tmp_path: Path) -> None:
    """Every sandbox's host directory holds a copy (on a tmpfs): the gateway's client for the
    guest and the archive's own builder are no part of it; the daemon's modules are."""
    names = set(zipfile.ZipFile(build_zipapp(tmp_path / "guest.pyz")).namelist())
    assert not {
        n for n in names if n.startswith(("sandgate/guest/client.", "sandgate/guest/_zipapp."))
    }
    assert {"sandgate/guest/daemon.py", "sandgate/guest/daemon.pyc", "__main__.py"} <= names
