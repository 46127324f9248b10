"""The egress relay: ``127.0.0.1:EGRESS_PROXY_PORT`` inside the sandbox, one gateway
connection per client connection.

Trust: the relay is a convenience, not a boundary. It copies bytes both ways between a local
client and ``/run/sandgate/egress.sock`` without reading them; the gateway judges every
request, and code that skips the relay and talks to the socket directly meets the same
policy. When the socket is absent (no egress hook on this gateway, or not attached yet) a
client gets a 502 answer instead of a hang.
"""

from __future__ import annotations

import asyncio
import contextlib

from ._log import log
from ._splice import splice

__all__ = ["start_relay"]

_UNAVAILABLE = (
    b"HTTP/1.1 502 Bad Gateway\r\nX-Sandgate-Error: egress_unavailable\r\n"
    b"Content-Type: text/plain\r\nContent-Length: 45\r\nConnection: close\r\n\r\n"
    b"sandgate egress: this sandbox has no egress.\n"
)


async def start_relay(port: int, socket_path: str) -> asyncio.Server | None:
    """Listens on ``127.0.0.1:port``; returns None (and logs) if the port is taken."""

    async def relay(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            up_reader, up_writer = await asyncio.open_unix_connection(socket_path)
        except OSError:
            with contextlib.suppress(OSError):
                writer.write(_UNAVAILABLE)
                await writer.drain()
            writer.transport.abort()
            return
        await splice(reader, writer, up_reader, up_writer)

    try:
        return await asyncio.start_server(relay, "127.0.0.1", port)
    except OSError as exc:
        log("egress_relay_unavailable", port=port, error=str(exc))
        return None
