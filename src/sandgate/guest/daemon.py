"""``sandgate-guest``: the daemon inside every sandbox, its PID 1.

Trust: whoever can connect to the socket is the gateway and is trusted completely: the
runtime binds the listening socket on the host (mode 0600, owned by host root, which nothing in
the sandbox maps to) and hands it to this daemon as an inherited fd, so nothing inside can
connect to it, and the sandbox's view of its directory is read-only. Everything inside the
sandbox — processes, files, other users, its root — is untrusted.

Enforced here: work on behalf of a user runs with that user's uid/gids (processes are forked
and drop privileges before exec; file operations run in a per-user worker process that has
dropped privileges, see ``_worker``; it starts on the user's first file operation and is
retired after ``worker_idle_s`` without one, so an idle sandbox is this one process);
malformed input closes only its own connection; memory per connection is bounded. As PID 1
of the sandbox's pid namespace the daemon cannot be killed or stopped from inside (the kernel
delivers no signal to a namespace's init that it has no handler for, and it handles only
SIGCHLD there); it is not dumpable, so the sandbox's root
cannot read or write its memory through ``/proc``; a worker that sandbox code stops is killed
and replaced, so a stopped worker never hangs a request. Not done here: resource limits,
network policy, seccomp (the runtime), authentication of E2B clients (the gateway).

Shape: one event loop (``_loop``: epoll, not asyncio, whose import would be most of every
sandbox's start; the start imports only modules built into the interpreter, see ``_lean``)
and *no threads*, so forking children and workers is safe. One
request per connection: the daemon reads exactly the first frame (never more, so a file
upload's DATA frames stay in the socket for the worker) and dispatches it.

Usage: ``python3 -I guest.pyz --listen-fd 3 --config /run/sandgate/guest.json`` (or
``--socket PATH`` to bind a socket itself, for tests and local runs)
"""

from __future__ import annotations

import _socket
import gc
import os
import sys

from ._config import GuestConfig
from ._errors import OpError
from ._lean import send_fds, suppress
from ._log import log
from ._loop import (
    BufferedSender,
    Event,
    Future,
    Handle,
    Task,
    accept_forever,
    close_socket,
    get_loop,
    readable,
    run,
    sleep,
    sock_connect,
    sock_recv,
    sock_sendall,
    spawn,
    wait_first,
    wait_for,
)
from ._process import Process, ProcessTable, SpawnSpec, decode_input
from ._splice import splice
from ._sudo import SudoServer
from ._users import User, lookup_user
from .protocol import (
    EGRESS_SOCKET,
    FILE_OP_NAMES,
    FRAME_HEADER,
    MAX_REQUEST,
    MAX_TUNNEL_WAIT_S,
    MAX_WORKER_MESSAGE,
    PROTOCOL_VERSION,
    Kind,
    decode_json,
    encode_json,
)

TYPE_CHECKING = False  # not typing's: the guest's start never imports typing (see _loop)
if TYPE_CHECKING:
    import signal as _signal
    from typing import Any
else:
    import _signal  # ``signal`` without its enums

__all__ = ["main"]

_REQUEST_TIMEOUT_S = 30.0
_CLOSE_TIMEOUT_S = 30.0
#: How often a ``tunnel`` with ``wait_s`` tries its port again (a refused loopback connect).
_TUNNEL_RETRY_S = 0.005


class _Worker:
    """The daemon's handle on one user's file worker."""

    def __init__(self, user: User, pid: int, ctrl: _socket.socket, now: float) -> None:
        self.user = user
        self.pid = pid
        self.ctrl = ctrl
        self.alive = True
        #: Loop time of the last request handed to it (``Daemon._retire_idle``).
        self.last_used = now
        self.idle_timer: Handle | None = None
        #: Hand-offs waiting for room in the control socket; failed when it is closed.
        self.send_waiters: set[Future[None]] = set()


class Daemon:
    def __init__(self, config: GuestConfig) -> None:
        self.config = config
        self.loop = get_loop()
        self.processes = ProcessTable(config)
        self.sudo = SudoServer(self.loop, enabled=config.sudo, max_running=config.max_processes)
        self.workers: dict[str, _Worker] = {}
        #: Every worker not reaped yet, retired ones included (they finish what they run).
        self.worker_pids: dict[int, _Worker] = {}
        self.tasks: set[Task[None]] = set()
        self.stopping = Event()

    # ---- lifecycle

    async def serve(self, listener: _socket.socket) -> None:
        listener.setblocking(False)
        self.loop.add_signal_handler(_signal.SIGCHLD, self.reap)
        if os.getpid() != 1:
            for sig in (_signal.SIGTERM, _signal.SIGINT):
                self.loop.add_signal_handler(sig, self.stopping.set)
        else:
            # SECURITY: as the sandbox's PID 1 the daemon keeps no handler a process inside
            # could trigger to stop it (the kernel drops, for a namespace's init, every signal
            # from inside that it has no handler for); the runtime kills it with SIGKILL from
            # outside. Python's own SIGINT handler (KeyboardInterrupt) is one such.
            _signal.signal(_signal.SIGINT, _signal.SIG_DFL)
        self.reap()
        self.sudo.start()
        relay = None
        if self.config.egress_proxy_port:
            from ._egress import start_relay  # only sandboxes with an egress proxy relay

            relay = start_relay(self.config.egress_proxy_port, EGRESS_SOCKET)
        log("started", pid=os.getpid(), version=PROTOCOL_VERSION)
        accept = spawn(accept_forever(listener, self._handle, self.tasks, "accept_failed"))
        await self.stopping.wait()
        accept.cancel()
        close_socket(listener)
        if relay is not None:
            relay.close()
        self.processes.kill_all()
        self.sudo.close()
        for worker in list(self.workers.values()):
            self._retire(worker)
        log("stopped")

    def reap(self) -> None:
        while True:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG | os.WUNTRACED)
            except ChildProcessError:
                return
            if pid == 0:
                return
            if os.WIFSTOPPED(status):
                self._on_stopped(pid)
                continue
            if self.processes.on_child_exit(pid, status) or self.sudo.on_child_exit(pid, status):
                continue
            worker = self.worker_pids.pop(pid, None)
            if worker is not None:
                self._retire(worker)
                log("worker_exited", user=worker.user.name, status=status)

    def _on_stopped(self, pid: int) -> None:
        """A child was stopped (SIGSTOP/SIGTSTP from sandbox code). A worker must never sit
        stopped with requests queued for it: it is killed, and the next request gets a new
        one. Anything else stopped is the sandbox's own business."""
        worker = self.worker_pids.get(pid)
        if worker is not None:
            log("worker_stopped", user=worker.user.name)
            self._retire(worker)
            with suppress(OSError):
                os.kill(pid, _signal.SIGKILL)

    # ---- one connection

    async def _handle(self, conn: _socket.socket) -> None:
        request: dict[str, Any] = {}
        try:
            try:
                payload = await wait_for(self._read_request(conn), _REQUEST_TIMEOUT_S)
                request = decode_json(payload)
            except (TimeoutError, ValueError, EOFError, OSError):
                return
            op = request.get("op")
            try:
                if op in FILE_OP_NAMES:
                    await self._hand_off(conn, payload, request)
                    return
                handler = _HANDLERS.get(op) if isinstance(op, str) else None
                if handler is None:
                    raise OpError("unimplemented", f"unknown operation: {op!r}")
                await handler(self, conn, request)
            except OpError as exc:
                await sock_sendall(conn, encode_json(exc.to_json()))
        except OSError:
            pass  # the client went away
        except Exception as exc:
            log("request_failed", op=str(request.get("op")), error=repr(exc))
            with suppress(OSError):
                await sock_sendall(
                    conn, encode_json(OpError("internal", f"guest error: {exc}").to_json())
                )
        finally:
            # A file op's fd now lives on in the worker (SCM_RIGHTS made its own copy); a
            # stream's sender may have closed this same socket object already.
            close_socket(conn)

    async def _read_request(self, conn: _socket.socket) -> bytes:
        header = await self._recv_exact(conn, FRAME_HEADER.size)
        kind, length = FRAME_HEADER.unpack(header)
        if kind != Kind.JSON or length > MAX_REQUEST:
            raise ValueError("the first frame must be a JSON request")
        return await self._recv_exact(conn, length)

    async def _recv_exact(self, conn: _socket.socket, size: int) -> bytes:
        buf = bytearray()
        while len(buf) < size:
            chunk = await sock_recv(conn, size - len(buf))
            if not chunk:
                raise EOFError
            buf += chunk
        return bytes(buf)

    def user(self, request: dict[str, Any]) -> User:
        name = request.get("user") or self.config.default_user
        if not isinstance(name, str):
            raise OpError("invalid_argument", "user must be a string")
        return lookup_user(name)

    # ---- file operations: handed to the user's worker

    def _worker_for(self, user: User) -> _Worker:
        """The user's live worker, started now if there is none (the first file operation
        pays a fork and the worker's imports, ~10 ms; an idle sandbox holds no worker)."""
        worker = self.workers.get(user.name)
        if worker is not None and worker.alive and worker.user == user:
            worker.last_used = self.loop.time()
            return worker
        if worker is not None:
            self._retire(worker)
        parent, child = _socket.socketpair(_socket.AF_UNIX, _socket.SOCK_SEQPACKET)
        pid = os.fork()
        if pid == 0:
            # Before anything else runs here: the event loop's state came with the fork, and
            # neither the collector (a finaliser closing a socket the daemon watches) nor a
            # signal (written to the daemon's wakeup socket) may reach it.
            gc.freeze()
            _signal.set_wakeup_fd(-1)
            parent.close()
            # Imported in the child only: the file operations' modules (threads, pwd and grp
            # lookups, ...) never weigh on PID 1's start-up or its resident memory.
            from ._worker import run_worker

            run_worker(child, user, self.config)
        child.close()
        parent.setblocking(False)
        worker = _Worker(user, pid, parent, self.loop.time())
        self.workers[user.name] = worker
        self.worker_pids[pid] = worker
        worker.idle_timer = self.loop.call_later(
            self.config.worker_idle_s, self._retire_idle, worker
        )
        log("worker_started", user=user.name, pid=pid)
        return worker

    def _retire_idle(self, worker: _Worker) -> None:
        """Retires a worker no request reached for ``worker_idle_s``, else looks again when
        that much time has passed since its last request."""
        if not worker.alive:
            return
        left = worker.last_used + self.config.worker_idle_s - self.loop.time()
        if left > 0:
            worker.idle_timer = self.loop.call_later(left, self._retire_idle, worker)
            return
        log("worker_idle", user=worker.user.name, pid=worker.pid)
        self._retire(worker)

    def _retire(self, worker: _Worker) -> None:
        """Forgets a worker and closes its control socket. Closing is the whole shutdown
        protocol, and it loses nothing: requests already sent stay queued in the worker's end
        of the socketpair and are read before its end-of-file, and the worker finishes the
        operations it runs before it exits (``_worker._serve``); the next request for the
        user starts a new worker. Reaping stays with ``reap``."""
        worker.alive = False
        if worker.idle_timer is not None:
            worker.idle_timer.cancel()
            worker.idle_timer = None
        if self.workers.get(worker.user.name) is worker:
            del self.workers[worker.user.name]
        for waiter in worker.send_waiters:
            if not waiter.done():
                waiter.set_exception(ConnectionResetError("the file worker was retired"))
        worker.ctrl.close()

    async def _hand_off(
        self, conn: _socket.socket, payload: bytes, request: dict[str, Any]
    ) -> None:
        user = self.user(request)
        if len(payload) > MAX_WORKER_MESSAGE:
            raise OpError("invalid_argument", "request is too large")
        for _ in range(2):
            worker = self._worker_for(user)
            try:
                await self._send_fd(worker, payload, conn.fileno())
                return
            except OSError as exc:
                log("worker_unreachable", user=user.name, error=str(exc))
                self._retire(worker)
        raise OpError("unavailable", "file worker is not available")

    async def _send_fd(self, worker: _Worker, payload: bytes, fd: int) -> None:
        while True:
            if not worker.alive:
                raise ConnectionResetError("the file worker was retired")
            ctrl_fd = worker.ctrl.fileno()
            try:
                send_fds(worker.ctrl, [payload], [fd])
                return
            except BlockingIOError:
                ready: Future[None] = self.loop.create_future()
                handle = self.loop.add_writer(ctrl_fd, _resolve, ready)
                worker.send_waiters.add(ready)
                try:
                    await ready
                finally:
                    worker.send_waiters.discard(ready)
                    self.loop.remove_writer(ctrl_fd, handle)

    # ---- unary operations

    async def _reply(self, conn: _socket.socket, message: dict[str, Any]) -> None:
        await sock_sendall(conn, encode_json(message))

    async def op_ping(self, conn: _socket.socket, request: dict[str, Any]) -> None:
        await self._reply(conn, {"ok": True, "version": PROTOCOL_VERSION, "pid": os.getpid()})

    async def op_envs(self, conn: _socket.socket, request: dict[str, Any]) -> None:
        await self._reply(conn, {"ok": True, "envs": self.config.envs})

    async def op_configure(self, conn: _socket.socket, request: dict[str, Any]) -> None:
        """Replaces the sandbox-level environment (a claimed warm sandbox, envd's ``/init``)
        and, when the request names them, the default user and working directory. Only
        processes started afterwards see the new values; the file workers keep resolving
        relative paths as they did (a worker is never stopped under a running operation)."""
        changes: dict[str, Any] = {"envs": request.get("envs")}
        for key in ("default_user", "default_workdir"):
            if key in request:
                changes[key] = request[key]
        try:
            config = GuestConfig.from_json({**self.config.as_json(), **changes})
            if config.default_workdir is not None and not config.default_workdir.startswith("/"):
                raise ValueError("config: default_workdir must be an absolute path")
        except ValueError as exc:
            await self._reply(conn, {"ok": False, "code": "invalid_argument", "message": str(exc)})
            return
        if "default_user" in changes:
            lookup_user(config.default_user)  # OpError not_found: no such user here
        self.config = config
        self.processes.reconfigure(config)
        await self._reply(conn, {"ok": True})

    async def op_logs(self, conn: _socket.socket, request: dict[str, Any]) -> None:
        """The process log since sequence number ``after`` (``_journal``)."""
        after = request.get("after", 0)
        if not isinstance(after, int) or isinstance(after, bool) or after < 0:
            raise OpError("invalid_argument", "after must be a non-negative integer")
        body = self.processes.journal.reply(after)
        await sock_sendall(conn, FRAME_HEADER.pack(Kind.JSON, len(body)) + body)

    async def op_list(self, conn: _socket.socket, request: dict[str, Any]) -> None:
        infos = [proc.info() for proc in self.processes.running.values()]
        await self._reply(conn, {"ok": True, "processes": infos})

    async def op_signal(self, conn: _socket.socket, request: dict[str, Any]) -> None:
        proc = self.processes.find_running(request)
        self.processes.send_signal(proc, request.get("signal"))
        await self._reply(conn, {"ok": True})

    async def op_send_input(self, conn: _socket.socket, request: dict[str, Any]) -> None:
        proc = self.processes.find_running(request)
        data = decode_input(request)
        await self.processes.send_input(proc, data, bool(request.get("pty", False)))
        await self._reply(conn, {"ok": True})

    async def op_close_stdin(self, conn: _socket.socket, request: dict[str, Any]) -> None:
        self.processes.close_stdin(self.processes.find_running(request))
        await self._reply(conn, {"ok": True})

    async def op_resize(self, conn: _socket.socket, request: dict[str, Any]) -> None:
        proc = self.processes.find_running(request)
        self.processes.resize(proc, request.get("cols"), request.get("rows"))
        await self._reply(conn, {"ok": True})

    # ---- streams

    async def op_spawn(self, conn: _socket.socket, request: dict[str, Any]) -> None:
        spec = SpawnSpec.from_request(request)
        user = self.user(request)
        sender = BufferedSender(conn)
        try:
            # No await between spawning and subscribing: the first output must not be missed.
            proc = self.processes.spawn(spec, user)
        except OpError as exc:
            sender.write(encode_json(exc.to_json()))
            await sender.close(_CLOSE_TIMEOUT_S)
            return
        await self._stream(conn, sender, proc)

    async def op_connect(self, conn: _socket.socket, request: dict[str, Any]) -> None:
        proc = self.processes.find(request)
        await self._stream(conn, BufferedSender(conn), proc)

    async def _stream(self, conn: _socket.socket, sender: BufferedSender, proc: Process) -> None:
        """Sends start, live output and end; the client leaving only unsubscribes it. The
        client sends nothing on a stream: the socket turning readable means it left."""
        sender.write(encode_json({"ev": "start", "pid": proc.pid}))
        if proc.end is not None:
            sender.write(encode_json(proc.end))
            await sender.close(_CLOSE_TIMEOUT_S)
            return
        proc.subscribers.add(sender)
        ended = spawn(proc.ended.wait())
        gone = spawn(readable(conn.fileno()))
        try:
            await wait_first((ended, gone, sender.lost))
        finally:
            proc.subscribers.discard(sender)
            ended.cancel()
            gone.cancel()
        if proc.ended.is_set():
            await sender.close(_CLOSE_TIMEOUT_S)
        else:
            sender.abort()

    async def op_tunnel(self, conn: _socket.socket, request: dict[str, Any]) -> None:
        port = request.get("port")
        if not isinstance(port, int) or isinstance(port, bool) or not 0 < port < 65536:
            raise OpError("invalid_argument", "port must be an integer in 1..65535")
        wait_s = request.get("wait_s", 0)
        if (
            not isinstance(wait_s, int | float)
            or isinstance(wait_s, bool)
            or not 0 <= wait_s <= MAX_TUNNEL_WAIT_S
        ):
            raise OpError("invalid_argument", f"wait_s must be a number in 0..{MAX_TUNNEL_WAIT_S}")
        deadline = get_loop().time() + wait_s
        while True:
            upstream = await _connect_local(port)
            if upstream is not None:
                break
            if get_loop().time() >= deadline:
                raise OpError("unavailable", "port is not open")
            await sleep(_TUNNEL_RETRY_S)
        try:
            await sock_sendall(conn, encode_json({"ok": True}))
        except BaseException:
            close_socket(upstream)
            raise
        await splice(conn, upstream)


async def _connect_local(port: int) -> _socket.socket | None:
    """A connection to ``127.0.0.1:port``, or ``None`` when nothing accepts it there."""
    try:
        upstream = _socket.socket(_socket.AF_INET, _socket.SOCK_STREAM | _socket.SOCK_CLOEXEC)
    except OSError:
        return None
    try:
        upstream.setblocking(False)
        await sock_connect(upstream, ("127.0.0.1", port))
    except OSError:
        close_socket(upstream)
        return None
    except BaseException:
        close_socket(upstream)
        raise
    return upstream


def _resolve(future: Future[None]) -> None:
    if not future.done():
        future.set_result(None)


_HANDLERS: dict[str, Any] = {
    "ping": Daemon.op_ping,
    "envs": Daemon.op_envs,
    "configure": Daemon.op_configure,
    "list": Daemon.op_list,
    "logs": Daemon.op_logs,
    "signal": Daemon.op_signal,
    "send_input": Daemon.op_send_input,
    "close_stdin": Daemon.op_close_stdin,
    "resize": Daemon.op_resize,
    "spawn": Daemon.op_spawn,
    "connect": Daemon.op_connect,
    "tunnel": Daemon.op_tunnel,
}


def _listen(path: str) -> _socket.socket:
    """Binds under a temporary name and renames into place: a client that can connect to
    ``path`` always reaches a daemon that is listening (``--socket``, outside sandboxes)."""
    temp = f"{path}.{os.getpid()}.tmp"
    with suppress(FileNotFoundError):
        os.unlink(temp)
    listener = _socket.socket(_socket.AF_UNIX, _socket.SOCK_STREAM)
    listener.bind(temp)
    os.chmod(temp, 0o600)
    if os.geteuid() == 0:
        os.chown(temp, 0, 0)
    listener.listen(256)
    listener.setblocking(False)
    os.rename(temp, path)
    return listener


def _close_inherited(listen_fd: int | None) -> None:
    """SECURITY: closes every descriptor above stdio the runtime left open, but the listening
    socket. bubblewrap keeps what it was given open for the sandbox (``--userns``' namespace
    fd, for one); whatever a runtime leaks, the guest (PID 1, root of the sandbox) must not
    hold it, nor any process it forks (ESC-01)."""
    try:
        fds = [int(name) for name in os.listdir("/proc/self/fd")]
    except OSError:
        fds = list(range(3, os.sysconf("SC_OPEN_MAX")))
    for fd in fds:
        if fd > 2 and fd != listen_fd:
            with suppress(OSError):  # listdir's own, closed already
                os.close(fd)


def _ensure_std_fds() -> None:
    # Pipes created later must never land on 0-2, or a child's dup2 would clobber them.
    for fd in (0, 1, 2):
        try:
            os.fstat(fd)
        except OSError:
            null = os.open(os.devnull, os.O_RDWR)
            if null != fd:
                os.dup2(null, fd)
                os.close(null)


async def _run(listener: _socket.socket, config: GuestConfig) -> None:
    await Daemon(config).serve(listener)


def _harden_self() -> None:
    """SECURITY: makes the guest not dumpable, so /proc/<guest>/mem, environ and fd need
    CAP_SYS_PTRACE in the sandbox's user namespace, which nothing inside has; the workers it
    forks inherit it. The kernel clears ``dumpable`` whenever a process's effective ids change;
    switching the effective gid away and back does that without ``prctl`` (ctypes would cost
    every sandbox's start its import)."""
    if os.getegid() != 0:
        return  # not the sandbox's root (a local run): nothing to protect, nothing to switch
    try:
        os.setegid(1)
        os.setegid(0)
    except OSError as exc:
        log("harden_failed", error=str(exc))


_USAGE = "usage: sandgate-guest (--listen-fd FD | --socket PATH) --config PATH"


def _parse_args(argv: list[str]) -> tuple[int | None, str | None, str]:
    """``(listen_fd, socket_path, config_path)`` from the guest's three fixed options. Not
    ``argparse``: the runtime writes this command line, and parsing it must not cost every
    sandbox's start the import (~3 ms here) of a general parser with help and localisation."""
    values: dict[str, str] = {}
    rest = list(argv)
    while rest:
        option = rest.pop(0)
        name, eq, inline = option.partition("=")
        if name not in ("--listen-fd", "--socket", "--config") or name in values:
            raise ValueError(f"unexpected argument: {option!r}")
        if eq:
            values[name] = inline
        elif rest:
            values[name] = rest.pop(0)
        else:
            raise ValueError(f"{name} needs a value")
    if ("--listen-fd" in values) == ("--socket" in values):
        raise ValueError("exactly one of --listen-fd and --socket is required")
    if "--config" not in values:
        raise ValueError("--config is required")
    fd = values.get("--listen-fd")
    if fd is not None and not (fd.isdigit() and fd.isascii()):
        raise ValueError(f"--listen-fd must be a file descriptor number, not {fd!r}")
    return (int(fd) if fd is not None else None), values.get("--socket"), values["--config"]


def main(argv: list[str] | None = None) -> None:
    """Parses the command line, loads the config and serves (until SIGTERM/SIGINT, unless
    it is PID 1, which only the runtime ends)."""
    try:
        listen_fd, socket_path, config_path = _parse_args(sys.argv[1:] if argv is None else argv)
    except ValueError as exc:
        print(f"{_USAGE}\nsandgate-guest: error: {exc}", file=sys.stderr)
        sys.exit(2)
    _close_inherited(listen_fd)
    _ensure_std_fds()
    os.umask(0o022)
    _harden_self()
    try:
        config = GuestConfig.load(config_path)
    except (OSError, ValueError) as exc:
        log("bad_config", path=config_path, error=str(exc))
        sys.exit(2)
    if listen_fd is not None:
        listener = _socket.socket(fileno=listen_fd)
        os.set_inheritable(listener.fileno(), False)
    else:
        assert socket_path is not None
        listener = _listen(socket_path)
    run(_run(listener, config))


if __name__ == "__main__":
    main()
