"""The options of ``POST /contexts`` that need checking: who a context's kernel runs as, and
the working directory it starts in."""

from __future__ import annotations

import os
import pwd

__all__ = ["DEFAULT_CWD", "context_cwd", "context_user"]

DEFAULT_CWD = "/home/user"


def context_user(name: str | None) -> str | None:
    """The user a new context's kernel runs as: ``None`` for the server's own user (the
    default), else an existing account of the sandbox; raises ``ValueError``."""
    if not name:
        return None
    try:
        account = pwd.getpwnam(name)
    except KeyError:
        raise ValueError(f"user {name!r} does not exist in this sandbox") from None
    return None if account.pw_uid == os.geteuid() else name


def context_cwd(cwd: str | None, user: str | None) -> str:
    """``cwd`` as an absolute path: ``~`` is the context user's home, and a relative path
    starts there, as relative paths do everywhere in E2B's API."""
    if not cwd:
        return DEFAULT_CWD
    home = os.path.expanduser(f"~{user}") if user else os.path.expanduser("~")
    if cwd == "~" or cwd.startswith("~/"):
        cwd = home + cwd[1:]
    return os.path.normpath(os.path.join(home, cwd))
