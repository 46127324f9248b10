"""Linux users as the guest sees them, and the E2B path rules that depend on them."""

from __future__ import annotations

import os
import pwd

from ._errors import OpError

__all__ = ["MAX_PATH", "User", "enter_cwd", "is_proc", "lookup_user", "resolve_path"]

#: Longest path (in bytes, after encoding) the guest accepts.
MAX_PATH = 4096

_DEFAULT_PATH = ("/usr/local/sbin", "/usr/local/bin", "/usr/sbin", "/usr/bin", "/sbin", "/bin")


class User:
    """A user as ``pwd`` knows it; never changed once made, compared by value. A plain class:
    the daemon's start imports neither ``dataclasses`` nor ``typing`` (``_loop``)."""

    __slots__ = ("gid", "groups", "home", "name", "uid")

    def __init__(self, name: str, uid: int, gid: int, groups: tuple[int, ...], home: str):
        self.name = name
        self.uid = uid
        self.gid = gid
        self.groups = groups
        self.home = home

    def _key(self) -> tuple[str, int, int, tuple[int, ...], str]:
        return (self.name, self.uid, self.gid, self.groups, self.home)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, User) and self._key() == other._key()

    def __hash__(self) -> int:
        return hash(self._key())

    def __repr__(self) -> str:
        return f"User(name={self.name!r}, uid={self.uid}, gid={self.gid})"

    def base_env(self) -> dict[str, str]:
        """PATH, HOME, USER and LOGNAME for a process of this user (sandbox envs go on top)."""
        inherited = [p for p in os.environ.get("PATH", "").split(":") if p]
        path = inherited + [p for p in _DEFAULT_PATH if p not in inherited]
        return {"PATH": ":".join(path), "HOME": self.home, "USER": self.name, "LOGNAME": self.name}


#: Users looked up while ``/etc/passwd`` and ``/etc/group`` stayed as they were: name ->
#: (the files' identity, the user). Every command and file operation names its user, and
#: reading both files costs ~0.15 ms a time inside a sandbox; two ``stat`` calls, ~15 µs.
_known: dict[str, tuple[tuple[int, ...], User]] = {}
_MAX_KNOWN = 64


def lookup_user(name: str) -> User:
    """Returns the named user; an unknown name is ``unauthenticated`` (as envd answers).
    A user is looked up again once either file changed (``useradd``, ``usermod`` and
    ``passwd`` replace the file: a new inode; an edit in place changes its size or times)."""
    stamp = _files_stamp()
    known = _known.get(name)
    if known is not None and stamp is not None and known[0] == stamp:
        return known[1]
    try:
        entry = pwd.getpwnam(name)
    except (KeyError, ValueError):
        raise OpError("unauthenticated", f"invalid username: {name!r}") from None
    try:
        groups = tuple(os.getgrouplist(entry.pw_name, entry.pw_gid))
    except OSError:
        groups = (entry.pw_gid,)
    user = User(entry.pw_name, entry.pw_uid, entry.pw_gid, groups, entry.pw_dir or "/")
    if stamp is not None:
        if len(_known) >= _MAX_KNOWN:
            _known.clear()
        _known[name] = (stamp, user)
    return user


def _files_stamp() -> tuple[int, ...] | None:
    """What identifies the current ``/etc/passwd`` and ``/etc/group``; ``None`` if either
    cannot be read (then nothing is remembered)."""
    stamp: list[int] = []
    for path in ("/etc/passwd", "/etc/group"):
        try:
            st = os.stat(path)
        except OSError:
            return None
        stamp += (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)
    return tuple(stamp)


def resolve_path(path: str, user: User, default_workdir: str | None) -> str:
    """Applies the envd path rules and returns an absolute, normalised path.

    Empty → ``default_workdir`` or home; ``~``/``~/x`` → home; relative → home/relative;
    absolute → as is. NUL bytes and paths over :data:`MAX_PATH` bytes are
    ``invalid_argument``. Symlinks are not resolved here: the kernel resolves them as the user.
    """
    if "\x00" in path:
        raise OpError("invalid_argument", "path contains a NUL byte")
    if len(path.encode("utf-8", "surrogateescape")) > MAX_PATH:
        raise OpError("invalid_argument", f"path is longer than {MAX_PATH} bytes")
    if not path:
        path = default_workdir or user.home
    elif path == "~":
        path = user.home
    elif path.startswith("~/"):
        path = os.path.join(user.home, path[2:])
    elif not path.startswith("/"):
        path = os.path.join(user.home, path)
    normal = os.path.normpath(path)
    return "/" + normal.lstrip("/") if normal.startswith("//") else normal


def is_proc(path: str) -> bool:
    return path == "/proc" or path.startswith("/proc/")


def enter_cwd(cwd: str) -> None:
    """``chdir`` to ``cwd`` as whoever the caller is now (the user, when starting a command:
    the kernel decides what they may enter), then the second half of ESC-13: the directory
    entered must be inside the sandbox's root and not under /proc. Raises ``OSError``."""
    os.chdir(cwd)
    real = os.getcwd()
    if not real.startswith("/") or is_proc(real):
        raise OSError(f"invalid_cwd: {cwd} resolves outside the sandbox")
