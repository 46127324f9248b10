"""Processes started by the guest: spawn, output fan-out with backpressure, exit, retention.

Trust: requests come from the gateway (trusted); the processes themselves are sandbox code
(untrusted: they may flood output, never read stdin, fork grandchildren, or exit at any
moment). Enforced here: each process runs as the selected user (uid, gid, supplementary
groups) in its own session with no controlling tty unless it asked for a PTY; the daemon's
memory per subscriber is bounded (a reader that stalls is dropped, the process is paused
while any subscriber's buffer is full); every child is reaped; the exit table is bounded.
Not done here: CPU/memory/pid limits (cgroups, set by the runtime).

Runs on the daemon's event loop only; the daemon has no threads, so ``fork`` is safe.
"""

from __future__ import annotations

import fcntl
import os
import stat
import struct
import time

from ._config import GuestConfig
from ._errors import OpError
from ._journal import Journal
from ._lean import suppress
from ._log import log
from ._loop import (
    BufferedSender,
    Event,
    Future,
    Handle,
    Lock,
    Task,
    get_loop,
    spawn,
    wait_first,
    wait_for,
)
from ._spawn import DirectSpawner, start_failure
from ._users import User, enter_cwd, is_proc, resolve_path
from .protocol import OUTPUT_CHUNK, PTY_CHUNK, Kind, encode_frame, encode_json

TYPE_CHECKING = False  # not typing's: the guest's start never imports typing (see _loop)
if TYPE_CHECKING:
    import signal as _signal
    from collections import OrderedDict
    from typing import Any
else:
    import _signal  # ``signal`` without its enums (see ``_lean``)
    from _collections import OrderedDict  # ``collections``' own, without its imports

__all__ = ["Process", "ProcessTable", "SpawnSpec"]

#: A subscriber whose socket buffer holds more than this pauses the process's output.
SUBSCRIBER_HIGH_WATER = 256 * 1024
#: A subscriber that cannot drain its buffer within this many seconds is dropped.
SUBSCRIBER_STALL_S = 10.0
#: After a PTY process exits, how long to keep reading output still held by the terminal.
PTY_EXIT_GRACE_S = 1.0
_MAX_RETAINED = 1024
#: ``oom_score_adj`` of every process the guest starts (the guest itself runs at 500).
PROCESS_OOM_SCORE_ADJ = b"1000"
_DRAIN_LIMIT = 4 * 1024 * 1024

_SIGNAL_NAMES: dict[int, str] = {
    _signal.SIGHUP: "hangup",
    _signal.SIGINT: "interrupt",
    _signal.SIGQUIT: "quit",
    _signal.SIGILL: "illegal instruction",
    _signal.SIGTRAP: "trace/breakpoint trap",
    _signal.SIGABRT: "aborted",
    _signal.SIGBUS: "bus error",
    _signal.SIGFPE: "floating point exception",
    _signal.SIGKILL: "killed",
    _signal.SIGUSR1: "user defined signal 1",
    _signal.SIGSEGV: "segmentation fault",
    _signal.SIGUSR2: "user defined signal 2",
    _signal.SIGPIPE: "broken pipe",
    _signal.SIGALRM: "alarm clock",
    _signal.SIGTERM: "terminated",
}


class SpawnSpec:
    """What to run, validated by :meth:`from_request`; never changed once made (a plain
    class: no ``dataclasses`` or ``typing`` import at start, see ``_loop``)."""

    __slots__ = ("args", "cmd", "cwd", "envs", "pty", "stdin", "tag", "timeout_ms")

    def __init__(
        self,
        cmd: str,
        args: list[str],
        envs: dict[str, str],
        cwd: str,
        tag: str | None,
        stdin: bool,
        pty: tuple[int, int] | None,  # (cols, rows)
        timeout_ms: int,
    ) -> None:
        self.cmd = cmd
        self.args = args
        self.envs = envs
        self.cwd = cwd
        self.tag = tag
        self.stdin = stdin
        self.pty = pty
        self.timeout_ms = timeout_ms

    @classmethod
    def from_request(cls, request: dict[str, Any]) -> SpawnSpec:
        cmd = request.get("cmd")
        args = request.get("args") or []
        envs = request.get("envs") or {}
        cwd = request.get("cwd") or ""
        tag = request.get("tag")
        timeout_ms = request.get("timeout_ms") or 0
        if not isinstance(cmd, str) or not cmd or "\0" in cmd:
            raise OpError("invalid_argument", "cmd must be a non-empty string")
        if not isinstance(args, list) or not all(
            isinstance(a, str) and "\0" not in a for a in args
        ):
            raise OpError("invalid_argument", "args must be a list of strings")
        if not isinstance(envs, dict) or not all(
            isinstance(k, str)
            and k
            and "=" not in k
            and "\0" not in k
            and isinstance(v, str)
            and "\0" not in v
            for k, v in envs.items()
        ):
            raise OpError("invalid_argument", "envs must map names (no '=' or NUL) to strings")
        if not isinstance(cwd, str):
            raise OpError("invalid_argument", "cwd must be a string")
        if tag is not None and not isinstance(tag, str):
            raise OpError("invalid_argument", "tag must be a string")
        if not isinstance(timeout_ms, int) or isinstance(timeout_ms, bool) or timeout_ms < 0:
            raise OpError("invalid_argument", "timeout_ms must be a non-negative integer")
        pty = request.get("pty")
        size: tuple[int, int] | None = None
        if pty is not None:
            if not isinstance(pty, dict):
                raise OpError("invalid_argument", "pty must be an object")
            size = _size(pty.get("cols", 80), pty.get("rows", 24))
        return cls(
            cmd, list(args), dict(envs), cwd, tag, bool(request.get("stdin")), size, timeout_ms
        )


def _size(cols: Any, rows: Any) -> tuple[int, int]:
    if not all(
        isinstance(v, int) and not isinstance(v, bool) and 0 < v < 65536 for v in (cols, rows)
    ):
        raise OpError("invalid_argument", "cols and rows must be integers in 1..65535")
    return cols, rows


def _termios() -> Any:
    """``termios``, imported by the first terminal: a shared library (``lib-dynload``) whose
    loading cost every guest's start ~0.25 ms of CPU on a small VM, for two constants only
    PTYs use. The daemon sets a new PTY's size before it forks, so its children find it
    imported."""
    import termios

    return termios


def _set_winsize(fd: int, cols: int, rows: int) -> None:
    fcntl.ioctl(fd, _termios().TIOCSWINSZ, struct.pack("HHHH", rows, cols, 0, 0))


def describe_status(status: int) -> tuple[int, bool, str]:
    """Returns ``(exit_code, exited, status text)`` the way envd reports a wait status."""
    if os.WIFEXITED(status):
        code = os.WEXITSTATUS(status)
        return code, True, f"exit status {code}"
    sig = os.WTERMSIG(status)
    text = f"signal: {_SIGNAL_NAMES.get(sig, f'signal {sig}')}"
    if os.WCOREDUMP(status):
        text += " (core dumped)"
    return -1, False, text


class Process:
    """One spawned process; ``end`` is set once it exited and its output was forwarded."""

    def __init__(
        self,
        pid: int,
        spec: SpawnSpec,
        cwd: str,
        stdin_fd: int | None,
        outputs: dict[int, int],  # fd -> frame kind
    ) -> None:
        self.pid = pid
        self.spec = spec
        self.cwd = cwd
        self.stdin_fd = stdin_fd
        self.outputs = outputs
        self.subscribers: set[BufferedSender] = set()
        self.end: dict[str, Any] | None = None
        self.ended = Event()
        self.exited_at = 0.0
        self.timed_out = False
        self.status: int | None = None
        self.paused = False
        self.input_lock = Lock()
        self.timer: Handle | None = None
        self.relief: Task[None] | None = None

    @property
    def is_pty(self) -> bool:
        return self.spec.pty is not None

    def info(self) -> dict[str, Any]:
        return {
            "pid": self.pid,
            "tag": self.spec.tag,
            "cmd": self.spec.cmd,
            "args": self.spec.args,
            "envs": self.spec.envs,
            "cwd": self.cwd,
            "pty": self.is_pty,
        }


class ProcessTable:
    """Running processes, recently exited ones, and the operations on them."""

    def __init__(self, config: GuestConfig, journal: Journal | None = None) -> None:
        self._config = config
        self._loop = get_loop()
        self.running: dict[int, Process] = {}
        self._exited: OrderedDict[int, Process] = OrderedDict()
        #: What the sandbox's logs say about these processes (collected by the gateway).
        self.journal = journal if journal is not None else Journal()
        #: Starts non-PTY processes without forking the daemon (``_spawn``).
        self.direct = DirectSpawner(PROCESS_OOM_SCORE_ADJ)

    def reconfigure(self, config: GuestConfig) -> None:
        """Applies new sandbox-level settings to processes started from now on."""
        self._config = config

    # ---- lookup

    def find(self, request: dict[str, Any]) -> Process:
        """The process named by ``pid`` or ``tag``: running first, then recently exited."""
        self._expire()
        pid, tag = request.get("pid"), request.get("tag")
        if isinstance(pid, int) and not isinstance(pid, bool):
            proc = self.running.get(pid) or self._exited.get(pid)
            if proc is not None:
                return proc
            raise OpError("not_found", f"process with pid {pid} not found")
        if isinstance(tag, str):
            for table in (self.running, self._exited):
                for proc in reversed(table.values()):
                    if proc.spec.tag == tag:
                        return proc
            raise OpError("not_found", f"process with tag {tag!r} not found")
        raise OpError("invalid_argument", "pid (integer) or tag (string) is required")

    def find_running(self, request: dict[str, Any]) -> Process:
        proc = self.find(request)
        if proc.end is not None or proc.status is not None:
            raise OpError("not_found", f"process {proc.pid} is not running")
        return proc

    def _expire(self) -> None:
        limit = time.monotonic() - self._config.exit_retention_s
        while self._exited:
            pid, proc = next(iter(self._exited.items()))
            if proc.exited_at >= limit and len(self._exited) <= _MAX_RETAINED:
                break
            del self._exited[pid]

    # ---- spawn

    def spawn(self, spec: SpawnSpec, user: User) -> Process:
        """Starts ``spec`` as ``user``; raises :class:`OpError` (and runs nothing) on bad input."""
        if len(self.running) >= self._config.max_processes:
            raise OpError(
                "resource_exhausted",
                f"too many processes (limit {self._config.max_processes})",
            )
        cwd = resolve_path(spec.cwd, user, self._config.default_workdir)
        _check_cwd(cwd)
        env = user.base_env() | self._config.envs | spec.envs
        argv = [spec.cmd, *spec.args]
        child_fds: list[int] = []
        parent_fds: list[int] = []
        try:
            if spec.pty is not None:
                master, slave = os.openpty()
                parent_fds.append(master)
                child_fds.append(slave)
                _set_winsize(master, *spec.pty)
                stdio = (slave, slave, slave)
                outputs = {master: Kind.PTY}
                stdin_fd: int | None = master
            else:
                out_r, out_w = os.pipe()
                err_r, err_w = os.pipe()
                parent_fds += [out_r, err_r]
                child_fds += [out_w, err_w]
                if spec.stdin:
                    in_r, in_w = os.pipe()
                    parent_fds.append(in_w)
                    child_fds.append(in_r)
                    stdin_fd = in_w
                else:
                    in_r = os.open(os.devnull, os.O_RDONLY | os.O_CLOEXEC)
                    child_fds.append(in_r)
                    stdin_fd = None
                stdio = (in_r, out_w, err_w)
                outputs = {out_r: Kind.STDOUT, err_r: Kind.STDERR}
            pid = None
            if spec.pty is None and self.direct.ready:
                pid = self.direct.spawn(argv, env, cwd, user, stdio)
            if pid is None:
                pid = self._fork(argv, env, cwd, user, stdio, spec.pty is not None, child_fds)
            for fd in child_fds:  # the child has its copies (_fork closed them already)
                os.close(fd)
            child_fds = []
        except OpError:
            for fd in parent_fds + child_fds:
                os.close(fd)
            raise
        except OSError as exc:
            for fd in parent_fds + child_fds:
                os.close(fd)
            raise OpError("internal", f"failed to start process: {exc}") from None
        for fd in outputs:
            os.set_blocking(fd, False)
        if stdin_fd is not None:
            os.set_blocking(stdin_fd, False)
        proc = Process(pid, spec, cwd, stdin_fd, outputs)
        self.running[pid] = proc
        self.journal.started(pid, argv, user.name, spec.tag, spec.pty is not None)
        for fd in outputs:
            self._loop.add_reader(fd, self._on_readable, proc, fd)
        if spec.timeout_ms:
            proc.timer = self._loop.call_later(spec.timeout_ms / 1000, self._on_timeout, proc)
        return proc

    def _fork(
        self,
        argv: list[str],
        env: dict[str, str],
        cwd: str,
        user: User,
        stdio: tuple[int, int, int],
        pty: bool,
        child_fds: list[int],
    ) -> int:
        """Forks a child that sets itself up and execs (``_exec_child``); closes
        ``child_fds`` in the daemon once the child has them; raises :class:`OpError` with
        what the child reported if it could not start the command."""
        err_r, err_w = os.pipe()
        child_fds.append(err_w)
        try:
            pid = os.fork()
        except OSError:
            os.close(err_r)
            raise
        if pid == 0:
            _exec_child(argv, env, cwd, user, stdio, pty, err_w)
        for fd in child_fds:
            os.close(fd)
        child_fds.clear()
        failure = _read_all(err_r)
        os.close(err_r)
        if failure:
            os.waitpid(pid, 0)
            code, _, message = failure.decode("utf-8", "replace").partition(":")
            raise OpError(code if code else "internal", message)
        return pid

    # ---- output

    def _on_readable(self, proc: Process, fd: int) -> None:
        limit = PTY_CHUNK if proc.is_pty else OUTPUT_CHUNK
        try:
            data = os.read(fd, limit)
        except BlockingIOError:
            return
        except OSError:  # EIO: the PTY's last slave fd closed
            data = b""
        if not data:
            self._close_output(proc, fd)
            if not proc.outputs and proc.status is not None:
                self._finish(proc)
            return
        self._publish(proc, proc.outputs[fd], data)

    def _publish(self, proc: Process, kind: int, data: bytes) -> None:
        if kind != Kind.PTY:
            self.journal.output(proc.pid, "stdout" if kind == Kind.STDOUT else "stderr", data)
        frame = encode_frame(kind, data)
        slow = []
        for sender in list(proc.subscribers):
            if sender.closed:
                proc.subscribers.discard(sender)
                continue
            sender.write(frame)
            if sender.pending > SUBSCRIBER_HIGH_WATER:
                slow.append(sender)
        if slow and not proc.paused:
            proc.paused = True
            for fd in proc.outputs:
                self._loop.remove_reader(fd)
            proc.relief = spawn(self._relieve(proc, slow))

    async def _relieve(self, proc: Process, slow: list[BufferedSender]) -> None:
        for sender in slow:
            try:
                await wait_for(sender.drain(), SUBSCRIBER_STALL_S)
            except (TimeoutError, ConnectionError):
                if sender in proc.subscribers:
                    log("subscriber_dropped", pid=proc.pid, reason="stalled")
                proc.subscribers.discard(sender)
                sender.abort()
        proc.paused = False
        if proc.end is None:
            for fd in proc.outputs:
                self._loop.add_reader(fd, self._on_readable, proc, fd)

    def _close_output(self, proc: Process, fd: int) -> None:
        if fd in proc.outputs:
            self._loop.remove_reader(fd)
            del proc.outputs[fd]
            if fd == proc.stdin_fd:
                self._loop.remove_writer(fd)
                proc.stdin_fd = None
            os.close(fd)

    def _drain_outputs(self, proc: Process) -> None:
        budget = _DRAIN_LIMIT
        for fd, kind in list(proc.outputs.items()):
            while budget > 0:
                try:
                    data = os.read(fd, OUTPUT_CHUNK if kind != Kind.PTY else PTY_CHUNK)
                except (BlockingIOError, OSError):
                    break
                if not data:
                    break
                budget -= len(data)
                self._publish(proc, kind, data)
            self._close_output(proc, fd)

    # ---- exit

    def on_child_exit(self, pid: int, status: int) -> bool:
        """Records a reaped child; ``False`` if the pid is not one of ours."""
        proc = self.running.get(pid)
        if proc is None:
            return False
        proc.status = status
        if proc.timer is not None:
            proc.timer.cancel()
        if proc.is_pty and proc.outputs:
            # Output the program wrote just before exiting may still be in the terminal's
            # buffers; keep reading until EOF (EIO) or the grace period ends.
            self._loop.call_later(PTY_EXIT_GRACE_S, self._finish, proc)
        else:
            self._finish(proc)
        return True

    def _on_timeout(self, proc: Process) -> None:
        proc.timed_out = True
        with suppress(ProcessLookupError):
            os.killpg(proc.pid, _signal.SIGKILL)

    def _finish(self, proc: Process) -> None:
        if proc.end is not None or proc.status is None:
            return
        self._drain_outputs(proc)
        if proc.stdin_fd is not None:
            self._loop.remove_writer(proc.stdin_fd)
            os.close(proc.stdin_fd)
            proc.stdin_fd = None
        code, exited, text = describe_status(proc.status)
        proc.end = {
            "ev": "end",
            "exit_code": code,
            "exited": exited,
            "status": text,
            "error": None if exited and code == 0 else text,
            "timed_out": proc.timed_out,
        }
        frame = encode_json(proc.end)
        for sender in proc.subscribers:
            if not sender.closed:
                sender.write(frame)
        self.journal.ended(proc.pid, proc.end)
        proc.exited_at = time.monotonic()
        self.running.pop(proc.pid, None)
        self._exited[proc.pid] = proc
        self._exited.move_to_end(proc.pid)
        self._expire()
        proc.ended.set()

    # ---- control

    async def send_input(self, proc: Process, data: bytes, to_pty: bool) -> None:
        if to_pty != proc.is_pty:
            kind = "a PTY" if proc.is_pty else "not a PTY"
            raise OpError("failed_precondition", f"process {proc.pid} is {kind}")
        if proc.stdin_fd is None:
            if not proc.is_pty and not proc.spec.stdin:
                raise OpError("failed_precondition", "process was started without stdin")
            raise OpError("failed_precondition", "stdin is closed")
        async with proc.input_lock:
            view = memoryview(data)
            while view:
                fd = proc.stdin_fd
                if fd is None:
                    raise OpError("failed_precondition", "stdin is closed")
                try:
                    view = view[os.write(fd, view) :]
                except BlockingIOError:
                    await self._writable(proc, fd)
                except OSError as exc:
                    raise OpError("failed_precondition", f"stdin is closed: {exc}") from None

    async def _writable(self, proc: Process, fd: int) -> None:
        ready: Future[None] = self._loop.create_future()
        handle = self._loop.add_writer(fd, _resolve, ready)
        ender = spawn(proc.ended.wait())
        try:
            await wait_first((ready, ender))
        finally:
            ender.cancel()
            self._loop.remove_writer(fd, handle)

    def close_stdin(self, proc: Process) -> None:
        if proc.is_pty:
            raise OpError("failed_precondition", "cannot close stdin of a PTY; send Ctrl+D (\\x04)")
        if proc.stdin_fd is None:
            if not proc.spec.stdin:
                raise OpError("failed_precondition", "process was started without stdin")
            return
        self._loop.remove_writer(proc.stdin_fd)
        os.close(proc.stdin_fd)
        proc.stdin_fd = None

    def resize(self, proc: Process, cols: Any, rows: Any) -> None:
        if not proc.is_pty or proc.stdin_fd is None:
            raise OpError("invalid_argument", f"process {proc.pid} is not a PTY")
        _set_winsize(proc.stdin_fd, *_size(cols, rows))

    def send_signal(self, proc: Process, sig: Any) -> None:
        if not isinstance(sig, int) or isinstance(sig, bool) or not 0 < sig < _signal.NSIG:
            raise OpError("invalid_argument", f"invalid signal: {sig!r}")
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            raise OpError("not_found", f"process {proc.pid} is not running") from None

    def kill_all(self) -> None:
        for proc in list(self.running.values()):
            with suppress(OSError):
                os.killpg(proc.pid, _signal.SIGKILL)


def _resolve(future: Future[None]) -> None:
    if not future.done():
        future.set_result(None)


def decode_input(request: dict[str, Any]) -> bytes:
    data = request.get("data", "")
    if not isinstance(data, str):
        raise OpError("invalid_argument", "data must be base64 text")
    import binascii  # what ``base64`` wraps; ``base64`` itself imports ``re``

    try:
        try:
            return binascii.a2b_base64(data, strict_mode=True)
        except TypeError:  # a Python before 3.11 (the template's): no strict mode
            import base64

            return base64.b64decode(data, validate=True)
    except ValueError:
        raise OpError("invalid_argument", "data is not valid base64") from None


def _check_cwd(cwd: str) -> None:
    # SECURITY (ESC-13): a cwd under /proc can name a directory outside the sandbox's root
    # (CVE-2024-21626: /proc/self/fd/N of a leaked fd); refuse it before and after symlinks.
    if is_proc(cwd) or is_proc(os.path.realpath(cwd)):
        raise OpError("invalid_argument", f"invalid_cwd: {cwd} is under /proc")
    try:
        st = os.stat(cwd)
    except OSError:
        raise OpError("invalid_argument", f"invalid_cwd: {cwd} does not exist") from None
    if not stat.S_ISDIR(st.st_mode):
        raise OpError("invalid_argument", f"invalid_cwd: {cwd} is not a directory")


def _read_all(fd: int) -> bytes:
    chunks = []
    while chunk := os.read(fd, 4096):
        chunks.append(chunk)
    return b"".join(chunks)


def _exec_child(
    argv: list[str],
    env: dict[str, str],
    cwd: str,
    user: User,
    stdio: tuple[int, int, int],
    pty: bool,
    report_fd: int,
) -> None:
    """Runs in the forked child: never returns. Failures are written to ``report_fd`` as
    ``code:message`` (the fd is close-on-exec, so a successful exec reports nothing)."""
    code = "internal"
    try:
        os.setsid()
        if pty:
            fcntl.ioctl(stdio[0], _termios().TIOCSCTTY, 0)
        for target, fd in enumerate(stdio):
            os.dup2(fd, target)
        for sig in (_signal.SIGPIPE, _signal.SIGXFSZ):
            _signal.signal(sig, _signal.SIG_DFL)
        # Out of memory, the kernel must pick the caller's processes before the guest (which
        # runs below this): raising one's own score needs no privilege.
        with suppress(OSError):
            oom = os.open("/proc/self/oom_score_adj", os.O_WRONLY)
            os.write(oom, PROCESS_OOM_SCORE_ADJ)
            os.close(oom)
        # SECURITY: groups, then gid, then uid: after setuid the child cannot undo any of it.
        os.setgroups(list(user.groups))
        os.setgid(user.gid)
        os.setuid(user.uid)
        code = "invalid_argument"
        enter_cwd(cwd)
        os.execvpe(argv[0], argv, env)  # noqa: S606 - argv is the caller's command by design
    except BaseException as exc:
        failure = start_failure(code, argv[0], cwd, exc)
        message = f"{failure.code}:{failure.message}"
        with suppress(OSError):
            os.write(report_fd, message.encode("utf-8", "replace"))
    finally:
        os._exit(127)
