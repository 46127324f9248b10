"""The egress relay: ``127.0.0.1:EGRESS_PROXY_PORT`` inside the sandbox, one gateway
connection per client connection.

Trust: the relay is a convenience, not a boundary. It copies bytes both ways between a local
client and ``/run/sandgate/egress.sock`` without reading them; the gateway judges every
request, and code that skips the relay and talks to the socket directly meets the same
policy. When the socket is absent (no egress hook on this gateway, or not attached yet) a
client gets a 502 answer instead of a hang.
"""

from __future__ import annotations

import _socket

from ._lean import suppress
from ._log import log
from ._loop import (
    Task,
    accept_forever,
    close_socket,
    sock_connect,
    sock_sendall,
    spawn,
    wait_for,
)
from ._splice import splice

__all__ = ["Relay", "start_relay"]

_UNAVAILABLE = (
    b"HTTP/1.1 502 Bad Gateway\r\nX-Sandgate-Error: egress_unavailable\r\n"
    b"Content-Type: text/plain\r\nContent-Length: 45\r\nConnection: close\r\n\r\n"
    b"sandgate egress: this sandbox has no egress.\n"
)
#: A client that does not read the 502 answer within this time is dropped.
_ANSWER_TIMEOUT_S = 10.0


class Relay:
    """The listening relay; :meth:`close` stops accepting (open connections run on)."""

    def __init__(self, listener: _socket.socket, socket_path: str) -> None:
        self._listener = listener
        self._socket_path = socket_path
        self._tasks: set[Task[None]] = set()
        self._accept = spawn(
            accept_forever(listener, self._relay, self._tasks, "egress_accept_failed")
        )

    def close(self) -> None:
        self._accept.cancel()
        close_socket(self._listener)

    async def _relay(self, conn: _socket.socket) -> None:
        try:
            upstream = _socket.socket(_socket.AF_UNIX, _socket.SOCK_STREAM | _socket.SOCK_CLOEXEC)
            upstream.setblocking(False)
        except OSError:
            close_socket(conn)
            return
        try:
            await sock_connect(upstream, self._socket_path)
        except OSError:
            close_socket(upstream)
            with suppress(OSError, TimeoutError):
                await wait_for(sock_sendall(conn, _UNAVAILABLE), _ANSWER_TIMEOUT_S)
            close_socket(conn)
            return
        await splice(conn, upstream)


def start_relay(port: int, socket_path: str) -> Relay | None:
    """Listens on ``127.0.0.1:port``; returns None (and logs) if the port is taken."""
    listener = _socket.socket(_socket.AF_INET, _socket.SOCK_STREAM | _socket.SOCK_CLOEXEC)
    try:
        listener.setsockopt(_socket.SOL_SOCKET, _socket.SO_REUSEADDR, 1)
        listener.bind(("127.0.0.1", port))
        listener.listen(128)
        listener.setblocking(False)
    except OSError as exc:
        listener.close()
        log("egress_relay_unavailable", port=port, error=str(exc))
        return None
    return Relay(listener, socket_path)
