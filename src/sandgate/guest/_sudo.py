"""The guest's side of ``sudo``: run a command as root (or another user) for a process inside.

Why not a setuid ``sudo``: every mount of a sandbox is ``nosuid`` and every process runs with
``no_new_privs``, so no binary can raise privileges; root of the sandbox is reachable only
through the guest, which already runs commands as root on the API's behalf. ``/usr/bin/sudo``
is a shim (``sudo.py``) that asks the guest here, over an abstract Unix socket of the
sandbox's own network namespace, passing its stdin/stdout/stderr as file descriptors.

Trust: any process of the sandbox may ask; what it gets is root *of the sandbox's user
namespace* (an unprivileged host uid holding ``GUEST_CAPABILITIES`` relative to that namespace)
— the same as the API's ``user="root"``, and nothing the tenant does not already own. The
operator can refuse all requests (``sandbox.sudo: false``). The peer's credentials come from the
kernel (``SO_PEERCRED``) and are recorded in ``SUDO_UID``/``SUDO_USER``, never trusted for more.

Protocol: the client sends one JSON frame (``argv``, ``env``, ``cwd``, ``user``) with three fds
attached; the guest answers ``{"ok": true, "ev": "started", "pid": N}`` then, when the command
ends, ``{"ev": "exit", "status": <wait status>}``; or ``{"ok": false, "message": ...}``. The
client may send ``{"signal": N}`` frames, forwarded to the command's process group; if the
client goes away first, the command gets SIGHUP, as from a terminal hangup.
"""

from __future__ import annotations

import _socket
import os
import pwd
import struct

from ._errors import OpError
from ._lean import recv_fds, suppress
from ._log import log
from ._loop import (
    Future,
    Loop,
    Task,
    accept_forever,
    close_socket,
    readable,
    sock_recv,
    sock_sendall,
    spawn,
    wait_first,
    wait_for,
)
from ._process import _exec_child, _read_all
from ._users import lookup_user
from .protocol import FRAME_HEADER, SUDO_SOCKET, Kind, decode_json, encode_json

TYPE_CHECKING = False  # not typing's: the guest's start never imports typing (see _loop)
if TYPE_CHECKING:
    import signal as _signal
    from typing import Any
else:
    import _signal  # ``signal`` without its enums (see ``_lean``)

__all__ = ["SudoServer"]

_MAX_REQUEST = 1024 * 1024
#: A client that connects and sends no whole request within this time is dropped.
_REQUEST_TIMEOUT_S = 30.0
_SECURE_PATH = ("/usr/local/sbin", "/usr/local/bin", "/usr/sbin", "/usr/bin", "/sbin", "/bin")
_SO_PEERCRED_FORMAT = "3i"


class SudoServer:
    def __init__(self, loop: Loop, *, enabled: bool, max_running: int):
        self._loop = loop
        self._enabled = enabled
        self._max_running = max_running
        self._running: dict[int, Future[int]] = {}
        self._listener: _socket.socket | None = None
        self._tasks: set[Task[None]] = set()

    def start(self) -> None:
        listener = _socket.socket(_socket.AF_UNIX, _socket.SOCK_STREAM | _socket.SOCK_CLOEXEC)
        try:
            listener.bind(SUDO_SOCKET)
        except OSError as exc:
            log("sudo_unavailable", error=str(exc))
            listener.close()
            return
        listener.listen(64)
        listener.setblocking(False)
        self._listener = listener
        task = spawn(accept_forever(listener, self._serve, self._tasks, "sudo_accept_failed"))
        self._tasks.add(task)

    def close(self) -> None:
        for task in self._tasks:
            task.cancel()
        if self._listener is not None:
            close_socket(self._listener)

    def on_child_exit(self, pid: int, status: int) -> bool:
        """Called by the daemon's reaper; True if ``pid`` was a sudo command."""
        done = self._running.pop(pid, None)
        if done is None:
            return False
        if not done.done():
            done.set_result(status)
        return True

    async def _serve(self, conn: _socket.socket) -> None:
        fds: list[int] = []
        try:
            pid_, uid, _gid = struct.unpack(
                _SO_PEERCRED_FORMAT,
                conn.getsockopt(_socket.SOL_SOCKET, _socket.SO_PEERCRED, struct.calcsize("3i")),
            )
            conn.setblocking(False)
            request, fds = await wait_for(self._read_request(conn), _REQUEST_TIMEOUT_S)
            if not self._enabled:
                raise _Refused(
                    "sudo is turned off on this Sandgate server (sandbox.sudo: false); "
                    'run the command through the API with user="root" instead'
                )
            if len(self._running) >= self._max_running:
                raise _Refused(f"too many sudo commands running (limit {self._max_running})")
            try:
                pid, done = self._spawn(request, fds, uid)
            except OpError as exc:
                raise _Refused(f"{request.get('user') or 'root'}: {exc.message}") from None
        except _Refused as exc:
            with suppress(OSError):
                await sock_sendall(conn, encode_json({"ok": False, "message": str(exc)}))
            close_socket(conn)
            return
        except (OSError, ValueError, EOFError, TimeoutError) as exc:
            log("sudo_request_failed", error=str(exc))
            close_socket(conn)
            return
        finally:
            _close_all(fds)
        log("sudo", caller_uid=uid, caller_pid=pid_, pid=pid, argv0=str(request["argv"][0])[:64])
        try:
            await sock_sendall(conn, encode_json({"ok": True, "ev": "started", "pid": pid}))
            await self._relay(conn, pid, done)
        except OSError:
            pass
        finally:
            close_socket(conn)

    async def _relay(self, conn: _socket.socket, pid: int, done: Future[int]) -> None:
        """Forwards the client's signals until the command ends, then sends its status."""
        reader: Task[bytes] = spawn(sock_recv(conn, 4096))
        buffer = b""
        try:
            while True:
                await wait_first((reader, done))
                if done.done():
                    status = done.result()
                    await sock_sendall(conn, encode_json({"ev": "exit", "status": status}))
                    return
                chunk = reader.result()
                if not chunk:  # the client is gone: hang up on the command
                    _signal_group(pid, _signal.SIGHUP)
                    return
                buffer += chunk
                buffer = _forward_signals(buffer, pid)
                reader = spawn(sock_recv(conn, 4096))
        finally:
            reader.cancel()

    async def _read_request(self, conn: _socket.socket) -> tuple[dict[str, Any], list[int]]:
        await readable(conn.fileno())
        data, fds, _, _ = recv_fds(conn, 65536, 3)
        try:
            if not data:
                raise EOFError("no request")
            while len(data) < FRAME_HEADER.size:
                data += await self._recv_more(conn)
            kind, length = FRAME_HEADER.unpack(data[: FRAME_HEADER.size])
            if kind != Kind.JSON or length > _MAX_REQUEST:
                raise ValueError("bad sudo request frame")
            while len(data) < FRAME_HEADER.size + length:
                data += await self._recv_more(conn)
            request = decode_json(data[FRAME_HEADER.size : FRAME_HEADER.size + length])
            _check(request, fds)
        except BaseException:
            _close_all(fds)  # the caller never sees them: close them here, not leak them
            raise
        return request, fds

    async def _recv_more(self, conn: _socket.socket) -> bytes:
        chunk = await sock_recv(conn, 65536)
        if not chunk:
            raise EOFError("request cut short")
        return chunk

    def _spawn(
        self, request: dict[str, Any], fds: list[int], caller_uid: int
    ) -> tuple[int, Future[int]]:
        target = lookup_user(request.get("user") or "root")
        argv = [str(a) for a in request["argv"]]
        env = {str(k): str(v) for k, v in request["env"].items()}
        caller = _user_name(caller_uid)
        env.update(
            HOME=target.home,
            USER=target.name,
            LOGNAME=target.name,
            SUDO_USER=caller,
            SUDO_UID=str(caller_uid),
            SUDO_GID=str(_primary_gid(caller_uid)),
            SUDO_COMMAND=" ".join(argv)[:4096],
        )
        path = [p for p in env.get("PATH", "").split(":") if p]
        env["PATH"] = ":".join(path + [p for p in _SECURE_PATH if p not in path])
        cwd = str(request.get("cwd") or target.home)
        report_r, report_w = os.pipe()
        pid = os.fork()
        if pid == 0:  # pragma: no cover - the child execs or exits
            os.close(report_r)
            _exec_child(argv, env, cwd, target, (fds[0], fds[1], fds[2]), False, report_w)
        os.close(report_w)
        failure = _read_all(report_r)
        os.close(report_r)
        if failure:
            with suppress(ChildProcessError):
                os.waitpid(pid, 0)
            _, _, message = failure.decode("utf-8", "replace").partition(":")
            if "No such file or directory" in message:
                message = f"{argv[0]}: command not found"
            raise _Refused(message)
        done: Future[int] = self._loop.create_future()
        self._running[pid] = done
        return pid, done


class _Refused(Exception):
    """A request the guest answers with ``{"ok": false}`` and the shim prints."""


def _check(request: Any, fds: list[int]) -> None:
    if len(fds) != 3:
        raise ValueError("a sudo request carries stdin, stdout and stderr")
    if not isinstance(request, dict):
        raise ValueError("a sudo request is an object")
    argv, env = request.get("argv"), request.get("env")
    if not isinstance(argv, list) or not argv or not all(isinstance(a, str) for a in argv):
        raise ValueError("argv must be a non-empty list of strings")
    if any("\0" in a for a in argv):
        raise ValueError("argv must not contain NUL")
    if not isinstance(env, dict) or not all(
        isinstance(k, str) and isinstance(v, str) and k and "=" not in k and "\0" not in k + v
        for k, v in env.items()
    ):
        raise ValueError("env must map names to strings")
    for key in ("cwd", "user"):
        if request.get(key) is not None and not isinstance(request[key], str):
            raise ValueError(f"{key} must be a string")


def _forward_signals(buffer: bytes, pid: int) -> bytes:
    """Consumes whole ``{"signal": N}`` frames from ``buffer``; returns what is left."""
    while len(buffer) >= FRAME_HEADER.size:
        kind, length = FRAME_HEADER.unpack(buffer[: FRAME_HEADER.size])
        if len(buffer) < FRAME_HEADER.size + length:
            break
        payload = buffer[FRAME_HEADER.size : FRAME_HEADER.size + length]
        buffer = buffer[FRAME_HEADER.size + length :]
        with suppress(ValueError, TypeError):
            number = decode_json(payload).get("signal")
            if kind == Kind.JSON and isinstance(number, int) and 0 < number < 65:
                _signal_group(pid, number)
    return buffer


def _close_all(fds: list[int]) -> None:
    for fd in fds:
        with suppress(OSError):
            os.close(fd)


def _signal_group(pid: int, number: int) -> None:
    with suppress(OSError):
        os.killpg(pid, number)


def _user_name(uid: int) -> str:
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return str(uid)


def _primary_gid(uid: int) -> int:
    try:
        return pwd.getpwuid(uid).pw_gid
    except KeyError:
        return uid
