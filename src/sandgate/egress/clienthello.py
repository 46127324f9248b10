"""The server name in a TLS ClientHello, read off a tunnel the proxy does not terminate.

Why: a CONNECT names one host, but a TLS client can ask the far end for another in its SNI;
behind a CDN that is domain fronting (NET-08). For tunnels it only splices, the proxy reads the
client's first flight, takes the SNI from it and forwards the same bytes untouched.

Trust: the bytes are hostile. Parsing is bounds-checked throughout, the flight is capped at
``MAX_FLIGHT`` and any malformation is reported as ``Malformed``, never an exception of
another kind.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Final

__all__ = ["MAX_FLIGHT", "FirstFlight", "Malformed", "read_first_flight", "server_name"]

#: Largest ClientHello accepted (a post-quantum key share is ~1.2 KiB; records are <= 16 KiB).
MAX_FLIGHT: Final = 64 * 1024
_HANDSHAKE: Final = 0x16
_CLIENT_HELLO: Final = 0x01
_SERVER_NAME: Final = 0x0000
_HOST_NAME: Final = 0x00


class Malformed(ValueError):
    """Not a readable ClientHello."""


@dataclass(frozen=True)
class FirstFlight:
    """What the client sent first: ``raw`` (to forward), whether it is TLS, and its SNI."""

    raw: bytes
    is_tls: bool
    sni: str | None = None


class _Cursor:
    def __init__(self, data: bytes) -> None:
        self.data = data
        self.at = 0

    def take(self, count: int) -> bytes:
        if count < 0 or self.at + count > len(self.data):
            raise Malformed("truncated ClientHello")
        chunk = self.data[self.at : self.at + count]
        self.at += count
        return chunk

    def number(self, size: int) -> int:
        return int.from_bytes(self.take(size), "big")

    def vector(self, length_size: int) -> bytes:
        return self.take(self.number(length_size))


def server_name(hello: bytes) -> str | None:
    """The host_name SNI of a ClientHello handshake message (type, length, body).

    Raises ``Malformed``."""
    cursor = _Cursor(hello)
    if cursor.number(1) != _CLIENT_HELLO:
        raise Malformed("first handshake message is not a ClientHello")
    body = _Cursor(cursor.take(cursor.number(3)))
    body.take(2 + 32)  # legacy_version, random
    body.vector(1)  # session id
    body.vector(2)  # cipher suites
    body.vector(1)  # compression methods
    if body.at == len(body.data):
        return None  # no extensions at all
    extensions = _Cursor(body.vector(2))
    while extensions.at < len(extensions.data):
        kind = extensions.number(2)
        data = extensions.vector(2)
        if kind != _SERVER_NAME:
            continue
        names = _Cursor(_Cursor(data).vector(2))
        while names.at < len(names.data):
            name_type = names.number(1)
            name = names.vector(2)
            if name_type == _HOST_NAME:
                try:
                    return name.decode("ascii")
                except UnicodeDecodeError:
                    raise Malformed("server name is not ASCII") from None
        return None
    return None


async def read_first_flight(reader: asyncio.StreamReader) -> FirstFlight:
    """Reads the records that carry the ClientHello (or one byte, if this is not TLS).

    Raises ``Malformed`` and ``asyncio.IncompleteReadError``."""
    first = await reader.readexactly(1)
    if first[0] != _HANDSHAKE:
        return FirstFlight(first, is_tls=False)
    header = first + await reader.readexactly(4)
    raw = bytearray()
    handshake = bytearray()
    needed: int | None = None
    while True:
        if header[0] != _HANDSHAKE:
            raise Malformed("ClientHello interrupted by another record type")
        length = int.from_bytes(header[3:5], "big")
        if length == 0 or len(raw) + 5 + length > MAX_FLIGHT:
            raise Malformed("ClientHello record has a bad length")
        payload = await reader.readexactly(length)
        raw += header + payload
        handshake += payload
        if needed is None and len(handshake) >= 4:
            needed = 4 + int.from_bytes(handshake[1:4], "big")
        if needed is not None and len(handshake) >= needed:
            break
        header = await reader.readexactly(5)
    return FirstFlight(bytes(raw), is_tls=True, sni=server_name(bytes(handshake[:needed])))
