"""The guest's one error type and the translation of ``OSError`` into protocol codes."""

from __future__ import annotations

import errno
from typing import Any

__all__ = ["OpError", "from_oserror"]


class OpError(Exception):
    """An operation failed in a way the gateway should see; ``code`` is a protocol error code."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message

    def to_json(self) -> dict[str, Any]:
        return {"ok": False, "code": self.code, "message": self.message}


_CODES: dict[int, str] = {
    errno.ENOENT: "not_found",
    errno.EACCES: "permission_denied",
    errno.EPERM: "permission_denied",
    errno.EROFS: "permission_denied",
    errno.EEXIST: "already_exists",
    errno.ENOTEMPTY: "already_exists",
    errno.ENOTDIR: "invalid_argument",
    errno.EISDIR: "invalid_argument",
    errno.ENAMETOOLONG: "invalid_argument",
    errno.ELOOP: "invalid_argument",
    errno.EINVAL: "invalid_argument",
    errno.EXDEV: "invalid_argument",
    errno.ENOSPC: "resource_exhausted",
    errno.EDQUOT: "resource_exhausted",
    errno.EMFILE: "resource_exhausted",
    errno.ENFILE: "resource_exhausted",
    errno.ENOMEM: "resource_exhausted",
}


def from_oserror(exc: OSError, what: str) -> OpError:
    """Maps an ``OSError`` raised while doing ``what`` (e.g. "open /x") to an :class:`OpError`."""
    if exc.errno in (errno.ENOSPC, errno.EDQUOT):
        return OpError("resource_exhausted", f"{what}: not enough disk space")
    code = _CODES.get(exc.errno or 0, "internal")
    return OpError(code, f"{what}: {exc.strerror or exc}")
