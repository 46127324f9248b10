"""Blocking frame I/O on a socket, for the per-user file worker (threads, no asyncio)."""

from __future__ import annotations

import socket
from typing import Any

from .protocol import FRAME_HEADER, MAX_FRAME, Kind, encode_frame, encode_json

__all__ = ["FrameError", "recv_exact", "recv_frame", "send_frame", "send_json"]


class FrameError(Exception):
    """The peer sent something that is not a valid frame, or closed mid-frame."""


def recv_exact(sock: socket.socket, size: int) -> bytes:
    """Reads exactly ``size`` bytes; ``b""`` if the peer closed before the first byte."""
    buf = bytearray(size)
    view = memoryview(buf)
    got = 0
    while got < size:
        n = sock.recv_into(view[got:])
        if n == 0:
            if got == 0:
                return b""
            raise FrameError("connection closed in the middle of a frame")
        got += n
    return bytes(buf)


def recv_frame(sock: socket.socket, limit: int = MAX_FRAME) -> tuple[int, bytes] | None:
    """Returns ``(kind, payload)``, or ``None`` when the peer closed cleanly between frames."""
    header = recv_exact(sock, FRAME_HEADER.size)
    if not header:
        return None
    kind, length = FRAME_HEADER.unpack(header)
    if kind > Kind.EOF or length > limit:
        raise FrameError(f"bad frame header (kind {kind}, length {length})")
    payload = recv_exact(sock, length) if length else b""
    if length and not payload:
        raise FrameError("connection closed in the middle of a frame")
    return kind, payload


def send_frame(sock: socket.socket, kind: int, payload: bytes = b"") -> None:
    sock.sendall(encode_frame(kind, payload))


def send_json(sock: socket.socket, message: dict[str, Any]) -> None:
    sock.sendall(encode_json(message))
