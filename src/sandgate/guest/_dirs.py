"""Making directories for a user the way E2B's envd does: a directory the user may not create
(its parent belongs to root: ``/workspace``, ``/opt/app``) is created by the sandbox's root and
given to the user.

Why: E2B clients rely on it (the OpenAI Agents SDK's sandbox session makes ``/workspace`` as
the default user before anything else). Inside one sandbox this grants nothing the tenant lacks:
root of the sandbox is theirs (``user="root"``, ``sudo``).

How: the file worker drops to the user with its saved uid still 0 (``_worker``), so it holds no
effective capability. Only here, on the calling thread alone, it raises its file-system ids to
0 (``setfsuid``/``setfsgid``: per thread, unlike ``seteuid``, so concurrent operations of other
threads stay the user's), creates the missing components, hands each to the user and drops back.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from typing import TYPE_CHECKING

from ._users import User

if TYPE_CHECKING:
    import ctypes

__all__ = ["make_dirs"]

_libc: ctypes.CDLL | None = None


def make_dirs(path: str, user: User, *, exist_ok: bool) -> None:
    """``os.makedirs(path)`` as ``user``; components the user may not create are made by root
    and chowned to the user. Raises what ``os.makedirs`` raises."""
    try:
        os.makedirs(path, exist_ok=exist_ok)
        return
    except PermissionError:
        if os.getuid() == 0 or os.getresuid()[2] != 0:
            raise
    with _as_root():
        parts = [p for p in os.path.normpath(path).split("/") if p]
        current = "/"
        created = False
        for part in parts:
            current = os.path.join(current, part)
            try:
                os.mkdir(current, 0o755)
            except FileExistsError:
                continue
            os.chown(current, user.uid, user.gid, follow_symlinks=False)
            created = True
        if not created and not exist_ok:
            raise FileExistsError(path)


@contextlib.contextmanager
def _as_root() -> Iterator[None]:
    """File-system ids 0 on this thread only (with root's file capabilities back in the
    effective set, since they stayed permitted); the user's again afterwards."""
    global _libc
    if _libc is None:
        import ctypes  # rarely needed (~10 ms): not paid by every worker's start

        _libc = ctypes.CDLL(None, use_errno=True)
    uid, gid = os.geteuid(), os.getegid()
    _libc.setfsgid(0)
    _libc.setfsuid(0)
    try:
        yield
    finally:
        _libc.setfsuid(uid)
        _libc.setfsgid(gid)
