"""The proxy's end of TLS in a tunnel it terminates: the only place a placeholder becomes a
secret.

Used for CONNECTs to a host:port that one of the sandbox's secrets is bound to. The tunnel has
already checked the policy, dialled the checked address and matched the client's SNI to the
CONNECT host. Then:

1. TLS with the sandbox client (``TlsServerStream``), presenting a certificate the install's
   CA minted for the host;
2. the request head is read and checked (``exchange.checked_head``): its ``Host`` must name
   the CONNECT host and port (default 443), else 400 ``host_mismatch`` (NET-08), before the
   upstream sees anything but a TCP connection;
3. TLS with the upstream, verified against the system's roots (plus ``upstream_ca_file``),
   for the CONNECT host, on the connection the tunnel dialled;
4. one request and its response (``exchange``): placeholders replaced in the bound headers
   only, secret values masked on the way back, the tunnel ends. Clients open a new tunnel per
   request, which every HTTP client does on ``Connection: close``.
"""

from __future__ import annotations

import asyncio
import ssl
from typing import Final

__all__ = ["TlsServerStream"]

_CHUNK: Final = 64 * 1024
_HANDSHAKE_TIMEOUT_S: Final = 15.0


class TlsServerStream:
    """The server end of TLS over a sandbox's tunnel, driven through memory BIOs so the
    handshake can start from bytes the tunnel already read (the ClientHello it inspected)."""

    def __init__(
        self,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        context: ssl.SSLContext,
    ) -> None:
        self._reader = reader
        self._writer = writer
        self._incoming = ssl.MemoryBIO()
        self._outgoing = ssl.MemoryBIO()
        self._tls = context.wrap_bio(self._incoming, self._outgoing, server_side=True)

    async def handshake(self, first_flight: bytes) -> None:
        """Raises ``ssl.SSLError``, ``ConnectionError`` or ``TimeoutError``."""
        self._incoming.write(first_flight)
        async with asyncio.timeout(_HANDSHAKE_TIMEOUT_S):
            while True:
                try:
                    self._tls.do_handshake()
                    break
                except ssl.SSLWantReadError:
                    await self._flush()
                    await self._fill()
        await self._flush()

    async def read(self) -> bytes:
        """Up to one chunk of plaintext; b"" at the end of the stream."""
        while True:
            try:
                return self._tls.read(_CHUNK)
            except ssl.SSLWantReadError:
                await self._flush()  # TLS 1.3 session tickets go out on the first read
                if not await self._fill():
                    return b""
            except (ssl.SSLZeroReturnError, ssl.SSLEOFError):
                return b""

    async def write(self, data: bytes) -> None:
        if data:
            self._tls.write(data)
        await self._flush()

    async def _fill(self) -> bool:
        data = await self._reader.read(_CHUNK)
        if not data:
            self._incoming.write_eof()
            return False
        self._incoming.write(data)
        return True

    async def _flush(self) -> None:
        data = self._outgoing.read()
        if data:
            self._writer.write(data)
            await self._writer.drain()
