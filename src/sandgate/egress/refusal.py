"""How the proxy says no: an HTTP answer with a stable error code and a reason.

``X-Sandgate-Error`` is the class (``destination_denied``, ``bad_request``, ``too_many_tunnels``,
``upstream_unavailable``, ``secret_unavailable``, ``audit_unavailable``, ``not_supported``) and
``X-Sandgate-Reason`` the precise cause (``host_not_allowed``, ``ip_literal``,
``resolved_to_private``, ``host_mismatch``, ...); the body says what to do.
"""

from __future__ import annotations

from typing import Final

__all__ = ["Refused"]

_STATUS_TEXT: Final = {
    400: "Bad Request",
    403: "Forbidden",
    421: "Misdirected Request",
    429: "Too Many Requests",
    501: "Not Implemented",
    502: "Bad Gateway",
    503: "Service Unavailable",
}


class Refused(Exception):
    """Raised anywhere in a tunnel to end it with this answer (if the client can still read
    one)."""

    def __init__(self, status: int, error: str, reason: str, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.error = error
        self.reason = reason
        self.message = message

    def answer(self) -> bytes:
        body = f"sandgate egress: {self.error} ({self.reason}): {self.message}\n".encode()
        head = (
            f"HTTP/1.1 {self.status} {_STATUS_TEXT.get(self.status, 'Error')}\r\n"
            f"Content-Type: text/plain; charset=utf-8\r\n"
            f"X-Sandgate-Error: {self.error}\r\n"
            f"X-Sandgate-Reason: {self.reason}\r\n"
            f"Content-Length: {len(body)}\r\n"
            "Connection: close\r\n\r\n"
        ).encode()
        return head + body
