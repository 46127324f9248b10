"""The guest's one error type and the translation of ``OSError`` into protocol codes."""

from __future__ import annotations

import errno

from .protocol import DISK_FULL

TYPE_CHECKING = False  # not typing's: the guest's start never imports typing (see _loop)
if TYPE_CHECKING:
    from typing import Any

__all__ = ["OpError", "from_oserror"]


class OpError(Exception):
    """An operation failed in a way the gateway should see; ``code`` is a protocol error code
    and ``reason``, when set, one of ``protocol.ERROR_REASONS`` refining it."""

    def __init__(self, code: str, message: str, reason: str | None = None) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.reason = reason

    def to_json(self) -> dict[str, Any]:
        reply: dict[str, Any] = {"ok": False, "code": self.code, "message": self.message}
        if self.reason is not None:
            reply["reason"] = self.reason
        return reply


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
    errno.EMFILE: "resource_exhausted",
    errno.ENFILE: "resource_exhausted",
    errno.ENOMEM: "resource_exhausted",
}

#: Every way the kernel says "this does not fit on the sandbox's disk": the file system is
#: full (ENOSPC), the sandbox's quota is used up (EDQUOT), or the file would outgrow the
#: file-size rlimit a runtime sets to the disk size (EFBIG; Python ignores SIGXFSZ).
_DISK_FULL = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EFBIG})


def from_oserror(exc: OSError, what: str) -> OpError:
    """Maps an ``OSError`` raised while doing ``what`` (e.g. "open /x") to an :class:`OpError`."""
    if exc.errno in _DISK_FULL:
        return OpError(
            "resource_exhausted", f"{what}: not enough disk space in the sandbox", DISK_FULL
        )
    code = _CODES.get(exc.errno or 0, "internal")
    return OpError(code, f"{what}: {exc.strerror or exc}")
