"""The per-user file worker: a child of the daemon that runs as one Linux user.

Trust: the worker trusts the daemon (its parent, over a private socketpair) and nothing in the
file system. It drops to the user's uid, gid and supplementary groups before it reads its first
request, so every file operation is checked by the kernel exactly as if the user had made it,
except one: a directory the user may not create is made by the sandbox's root and given to the
user, as E2B's envd does (``_dirs``; the saved uid stays 0 for that). Inside one sandbox that
grants nothing the tenant lacks (its root is theirs); the worker is not dumpable and cannot be
traced, so the user's processes cannot borrow it.

The daemon accepts a client connection, reads its request and passes the connection's fd here
with ``SCM_RIGHTS`` (``_lean.send_fds``); the worker serves it on a thread and writes the reply
straight to the client. Requests on the control socket are ``SOCK_SEQPACKET`` messages: the
raw request JSON with exactly one fd attached. The daemon retires an idle worker by closing
its end: the worker reads what is still queued, finishes every operation it runs, then exits.
"""

from __future__ import annotations

import _socket
import contextlib
import gc
import os
import signal
import socket
import threading
from typing import Any, NoReturn

from ._config import GuestConfig
from ._errors import OpError, from_oserror
from ._files import FILE_OPS, FileContext
from ._lean import recv_fds
from ._log import log
from ._users import User
from ._wire import FrameError, send_json
from .protocol import MAX_WORKER_MESSAGE, decode_json

__all__ = ["MAX_WORKER_MESSAGE", "run_worker"]

_MAX_CONNECTIONS = 512
_DISCARD_TIMEOUT_S = 10.0
_DISCARD_LIMIT = 256 * 1024 * 1024
_UPLOAD_OPS = frozenset({"write_file", "write_files"})


def run_worker(ctrl: _socket.socket, user: User, config: GuestConfig) -> NoReturn:
    """Entry point in the freshly forked child; never returns."""
    code = 0
    try:
        _detach_from_daemon(ctrl.fileno())
        _drop_privileges(user)
        _serve(ctrl, FileContext(user, config))
    except BaseException as exc:
        log("worker_failed", user=user.name, error=repr(exc))
        code = 1
    finally:
        os._exit(code)


def _detach_from_daemon(keep: int) -> None:
    # The daemon's event loop state was copied by fork; none of it may run or be collected here.
    gc.freeze()
    signal.set_wakeup_fd(-1)
    for sig in (signal.SIGCHLD, signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, signal.SIG_DFL)
    # SECURITY: drop every inherited fd (process pipes, other clients' sockets, the listener).
    try:
        fds = [int(name) for name in os.listdir("/proc/self/fd")]
    except OSError:
        fds = list(range(3, 65536))
    for fd in fds:
        if fd > 2 and fd != keep:
            with contextlib.suppress(OSError):
                os.close(fd)


def _drop_privileges(user: User) -> None:
    # The saved uid stays 0 (effective capabilities go with the effective uid, permitted ones
    # stay): ``_dirs.make_dirs`` may make a directory as root, on one thread, as E2B's envd
    # does. Everything else the kernel checks as the user.
    os.setgroups(list(user.groups))
    os.setresgid(user.gid, user.gid, 0)
    os.setresuid(user.uid, user.uid, 0)
    if user.uid != 0 and (os.geteuid() == 0 or os.getegid() != user.gid):
        raise RuntimeError("failed to drop privileges")
    try:
        os.chdir(user.home)
    except OSError:
        os.chdir("/")


def _serve(ctrl: _socket.socket, ctx: FileContext) -> None:
    slots = threading.BoundedSemaphore(_MAX_CONNECTIONS)
    while True:
        try:
            message, fds, _, _ = recv_fds(ctrl, MAX_WORKER_MESSAGE, 1)
        except InterruptedError:
            continue
        if not message and not fds:
            # Retired (or the daemon is gone): no request is lost with the operations still
            # running, so wait for each to give its slot back before the process exits.
            for _ in range(_MAX_CONNECTIONS):
                slots.acquire()
            return
        if not fds:
            continue
        conn = socket.socket(fileno=fds[0])
        conn.setblocking(True)
        try:
            request = decode_json(message)
        except ValueError:
            conn.close()
            continue
        if not slots.acquire(blocking=False):
            _reply_and_close(conn, OpError("resource_exhausted", "too many file operations"))
            continue
        threading.Thread(
            target=_handle, args=(conn, request, ctx, slots), daemon=True, name="file-op"
        ).start()


def _discard_upload(conn: socket.socket) -> None:
    """Reads and drops what the client is still uploading after an early error, so that
    closing the socket does not reset the connection before the client read the answer."""
    conn.shutdown(socket.SHUT_WR)
    conn.settimeout(_DISCARD_TIMEOUT_S)
    discarded = 0
    while discarded < _DISCARD_LIMIT:
        data = conn.recv(1024 * 1024)
        if not data:
            return
        discarded += len(data)


def _reply_and_close(conn: socket.socket, error: OpError) -> None:
    with contextlib.suppress(OSError):
        send_json(conn, error.to_json())
    conn.close()


def _handle(
    conn: socket.socket, request: dict[str, Any], ctx: FileContext, slots: threading.Semaphore
) -> None:
    op = str(request.get("op"))
    try:
        handler = FILE_OPS.get(op)
        if handler is None:
            raise OpError("unimplemented", f"unknown operation: {op}")
        try:
            handler(conn, request, ctx)
        except OpError as exc:
            send_json(conn, exc.to_json())
            if op in _UPLOAD_OPS:
                _discard_upload(conn)
        except (BrokenPipeError, ConnectionResetError, FrameError):
            pass
        except OSError as exc:
            send_json(conn, from_oserror(exc, op).to_json())
    except OSError:
        pass  # the client left; nothing to answer
    except Exception as exc:
        # A bug, not the client's fault: log it once and tell the gateway.
        log("file_op_failed", op=op, error=repr(exc))
        with contextlib.suppress(OSError):
            send_json(conn, OpError("internal", f"{op} failed: {exc}").to_json())
    finally:
        conn.close()
        slots.release()
