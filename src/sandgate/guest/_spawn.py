"""Starting a command as its user without a Python child: ``posix_spawn`` under the user's ids.

Why: ``fork`` copies the daemon's page tables, and the forked child then runs Python (setsid,
setgroups, setuid, chdir, the cwd check) before its ``exec``, touching and so copying page
after page: ~1.2 ms per command inside a sandbox on this machine kind, where the whole of
``bash -l -c true`` takes ~2 ms. ``posix_spawn`` (glibc's ``clone(CLONE_VM|CLONE_VFORK)``)
copies nothing and runs no Python in the child: ~0.65 ms (docs/benchmarks.md, "Guest:
commands started without a Python child"). It cannot change ids in the child, so the daemon
takes the user's ids itself for the moment of the spawn, and the child inherits them.

SECURITY: the daemon is single-threaded, so the switch is seen by nothing else it runs, and
nothing but this module's straight-line code (no ``await``) runs under the user's ids. The
switch keeps the saved ids at 0, which is how the daemon gets root back; the child inherits
that saved id, but only glibc's spawn code runs in it before ``execve``, which sets the saved
ids to the effective ones: after it, the process has exactly what a forked child that called
``setgroups``/``setgid``/``setuid`` has (uid, gid and groups of the user; no capabilities, as
neither its real nor its effective uid is 0). Bubblewrap raises the ambient capabilities of
the guest (a forked child loses them with ``setuid``, as all its uids become non-zero; a
spawned one would keep them through ``execve``), so the daemon empties its ambient set when it
starts (``prctl`` through the ``_ctypes`` C module alone, ~0.6 ms and ~0.3 MiB with its
``libffi``: the ``ctypes`` package would cost every sandbox ~2.5 ms), and this path is used
only if that worked. The
``chdir`` and the check that the directory is inside the sandbox (ESC-13) run under the
user's ids, as in the forked child, so the kernel decides what the user may enter.
While the user's ids are held (~0.3 ms a command), the daemon is not dumpable (the kernel
clears the flag on every change of effective ids; ``daemon._harden_self``), so nothing inside
can trace it or read its memory; its saved uid stays 0, so none of the user's processes may
set its limits. Its real uid is the user's, so in that moment the user's processes may do to it
what a user may do to its own processes' scheduling (lower its priority, pin its CPUs), which
slows only this sandbox, and send it signals, of which PID 1 takes only those it handles: only
SIGCHLD, which makes it reap (sandbox root, the default ``sudo``, could do all of this anyway).

One difference remains, glibc's: its spawn leaves its two internal signals (32 and 33, which
it reserves below ``SIGRTMIN``) ignored in the child, where a forked child has them at their
default (a program using them installs its own handlers, as every glibc and musl one does).

The process gets ``PROCESS_OOM_SCORE_ADJ`` by inheritance: the daemon raises its own score for
the spawn and sets it back (its own value is the floor the runtime set, which an unprivileged
write may return to). PTY processes need a controlling terminal set in the child, which
``posix_spawn`` cannot do: they keep the forked child (``_process._exec_child``).
"""

from __future__ import annotations

import os

from ._errors import OpError
from ._log import log
from ._users import User, enter_cwd

TYPE_CHECKING = False  # not typing's: the guest's start never imports typing (see _loop)
if TYPE_CHECKING:
    import signal as _signal
else:
    import _signal  # ``signal`` without its enums (see ``_lean``)

__all__ = ["DirectSpawner", "start_failure"]

_PR_CAP_AMBIENT = 47
_PR_CAP_AMBIENT_CLEAR_ALL = 4
#: Signals the daemon ignores that a command must start with at their default.
_DEFAULT_SIGNALS = (_signal.SIGPIPE, _signal.SIGXFSZ)


class DirectSpawner:
    """``ready`` when commands may be started with :meth:`spawn`; when not (the daemon is
    not the sandbox's root, or the platform lacks a part), the caller forks its own child."""

    __slots__ = ("_adj_fd", "_cwd", "_groups", "_own_adj", "_process_adj", "ready")

    def __init__(self, process_oom_score_adj: bytes) -> None:
        self.ready = False
        self._process_adj = process_oom_score_adj
        self._adj_fd = -1
        self._own_adj = b""
        self._groups: list[int] = []
        self._cwd = "/"
        if not hasattr(os, "posix_spawn") or os.getresuid() != (0, 0, 0):
            return  # a local run as a user, or no posix_spawn: the forked child does it all
        if os.getresgid() != (0, 0, 0):
            return
        try:
            self._adj_fd = os.open("/proc/self/oom_score_adj", os.O_RDWR | os.O_CLOEXEC)
            self._own_adj = os.pread(self._adj_fd, 16, 0).strip()
            self._groups = os.getgroups()
            self._cwd = os.getcwd()
            if _ambient_capabilities() != 0:
                _clear_ambient_capabilities()
                log("ambient_capabilities_cleared")
        except (ImportError, AttributeError, OSError, TypeError, ValueError) as exc:
            log("direct_spawn_unavailable", error=str(exc))
            self._close()
            return
        self.ready = True

    def spawn(
        self,
        argv: list[str],
        env: dict[str, str],
        cwd: str,
        user: User,
        stdio: tuple[int, int, int],
    ) -> int | None:
        """Starts ``argv`` as ``user`` in its own session, ``stdio`` as fds 0-2, and returns
        its pid; raises :class:`OpError` as the forked child reports (same codes, same
        messages). ``None`` (and ``ready`` off) if the platform turned out to lack a part:
        the caller forks instead."""
        actions = [(os.POSIX_SPAWN_DUP2, fd, target) for target, fd in enumerate(stdio)]
        os.write(self._adj_fd, self._process_adj)
        try:
            code = "internal"
            try:
                # Groups, then gid, then uid (after the uid, the gid could not be changed).
                os.setgroups(list(user.groups))
                os.setresgid(user.gid, user.gid, 0)
                os.setresuid(user.uid, user.uid, 0)
                code = "invalid_argument"
                enter_cwd(cwd)
                return _spawn_on_path(argv, env, actions)
            except NotImplementedError as exc:  # no POSIX_SPAWN_SETSID (glibc < 2.26)
                log("direct_spawn_unavailable", error=str(exc))
                self.ready = False
                return None
            except (OSError, ValueError) as exc:
                raise start_failure(code, argv[0], cwd, exc) from None
            finally:
                self._restore_ids()
        finally:
            try:
                os.write(self._adj_fd, self._own_adj)
            except OSError as exc:  # not a risk to anything but the guest: fork from now on
                log("oom_score_restore_failed", error=str(exc))
                self.ready = False

    def _restore_ids(self) -> None:
        try:
            os.setresuid(0, 0, 0)
            os.setresgid(0, 0, 0)
            os.setgroups(self._groups)
        except OSError as exc:  # cannot happen with saved ids of 0; never serve on as a user
            log("identity_restore_failed", error=str(exc))
            os._exit(70)
        try:
            os.chdir(self._cwd)
        except OSError:
            os.chdir("/")

    def _close(self) -> None:
        self.ready = False
        if self._adj_fd >= 0:
            os.close(self._adj_fd)
            self._adj_fd = -1


def _spawn_on_path(
    argv: list[str], env: dict[str, str], actions: list[tuple[int, int, int]]
) -> int:
    """``os.execvpe``'s search (``env``'s PATH, the first error other than "not found" wins)
    with one ``posix_spawn`` per candidate."""
    name = argv[0]
    candidates = [name] if "/" in name else [os.path.join(d, name) for d in os.get_exec_path(env)]
    first_error: OSError | None = None
    last_error: OSError = FileNotFoundError(2, "No such file or directory", name)
    for path in candidates:
        try:
            return os.posix_spawn(
                path, argv, env, file_actions=actions, setsid=True, setsigdef=_DEFAULT_SIGNALS
            )
        except OSError as exc:
            last_error = exc
            if first_error is None and not isinstance(exc, FileNotFoundError | NotADirectoryError):
                first_error = exc
    raise first_error or last_error


def start_failure(code: str, name: str, cwd: str, exc: BaseException) -> OpError:
    """How a command that could not start is reported, whichever way it was started (the
    forked child, ``_process._exec_child``, sends the same as ``code:message``)."""
    if isinstance(exc, PermissionError) and code == "invalid_argument":
        return OpError(code, f"cannot start {name!r} in {cwd}: {exc.strerror}")
    if isinstance(exc, OSError) and exc.strerror:
        return OpError(code, f"cannot start {name!r}: {exc.strerror}")
    return OpError(code, f"cannot start {name!r}: {exc}")


def _clear_ambient_capabilities() -> None:
    """``prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL)``, called through ``_ctypes``'s own
    ``call_function`` (in every CPython since 2.5); raises if the set is not empty after it.
    The daemon needs no ambient capability: a process it starts as root gets the bounding set
    at ``execve`` anyway, and one started as a user must get none."""
    import _ctypes  # the C module only: not the ``ctypes`` package's classes

    # None: the process's own symbols, libc's among them (what ``ctypes.CDLL(None)`` opens).
    address = _ctypes.dlsym(_ctypes.dlopen(None), "prctl")  # type: ignore[arg-type]
    _ctypes.call_function(address, (_PR_CAP_AMBIENT, _PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0))
    if _ambient_capabilities() != 0:
        raise OSError("the ambient capabilities are still set after prctl")


def _ambient_capabilities() -> int:
    """The daemon's ambient capability set, from ``/proc/self/status``."""
    with open("/proc/self/status", "rb") as status:
        for line in status:
            if line.startswith(b"CapAmb:"):
                return int(line.split()[1], 16)
    return 0  # a kernel without ambient capabilities (before 4.3) has none to clear
