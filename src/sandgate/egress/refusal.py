"""How the proxy says no: an HTTP answer with a stable error code, a reason and advice.

``X-Sandgate-Error`` is the class (``destination_denied``, ``bad_request``, ``too_many_tunnels``,
``upstream_unavailable``, ``secret_unavailable``, ``audit_unavailable``, ``not_supported``) and
``X-Sandgate-Reason`` the precise cause (``host_not_allowed``, ``ip_literal``,
``resolved_to_private``, ``host_mismatch``, ...). The message, which says what to do, is both
the body and the status line's reason phrase: many clients (pip, apt, Python's ``http.client``)
show only the status line of a refused CONNECT, so that is where a person must read the fix.
"""

from __future__ import annotations

import re
from typing import Final

__all__ = ["Refused"]

_MAX_PHRASE: Final = 400
_UNPRINTABLE: Final = re.compile(r"[^\x20-\x7e]")


class Refused(Exception):
    """Raised anywhere in a tunnel to end it with this answer (if the client can still read
    one)."""

    def __init__(self, status: int, error: str, reason: str, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.error = error
        self.reason = reason
        self.message = message

    @property
    def phrase(self) -> str:
        """The status line's reason phrase: printable ASCII only, bounded."""
        text = _UNPRINTABLE.sub("?", f"Sandgate egress: {self.message}")
        return text if len(text) <= _MAX_PHRASE else text[: _MAX_PHRASE - 3] + "..."

    def answer(self) -> bytes:
        body = f"sandgate egress: {self.error} ({self.reason}): {self.message}\n".encode()
        head = (
            f"HTTP/1.1 {self.status} {self.phrase}\r\n"
            f"Content-Type: text/plain; charset=utf-8\r\n"
            f"X-Sandgate-Error: {self.error}\r\n"
            f"X-Sandgate-Reason: {self.reason}\r\n"
            f"Content-Length: {len(body)}\r\n"
            "Connection: close\r\n\r\n"
        ).encode()
        return head + body
