"""Copying bytes both ways between two sockets until either side is done.

Memory is bounded: each direction holds at most one chunk, and reads the next one only once
the other side took the last (a peer that stops reading stops its sender's direction).
"""

from __future__ import annotations

import _socket

from ._lean import suppress
from ._loop import Task, close_socket, readable, sock_sendall, spawn, wait_first

__all__ = ["splice"]

_CHUNK = 64 * 1024


async def _pump(src: _socket.socket, dst: _socket.socket) -> None:
    while True:
        try:
            data = src.recv(_CHUNK)
        except (BlockingIOError, InterruptedError):
            await readable(src.fileno())
            continue
        if not data:
            break
        await sock_sendall(dst, data)
    with suppress(OSError):
        dst.shutdown(_socket.SHUT_WR)  # pass the end of file on; the other way may go on


async def splice(a: _socket.socket, b: _socket.socket) -> None:
    """Copies ``a`` -> ``b`` and ``b`` -> ``a`` until both ends finished or either failed,
    then closes both sockets (non-blocking ones)."""
    pumps: list[Task[None]] = [spawn(_pump(a, b)), spawn(_pump(b, a))]
    try:
        pending = list(pumps)
        while pending:
            await wait_first(pending)
            done = [task for task in pending if task.done()]
            pending = [task for task in pending if not task.done()]
            if any(task.cancelled() or task.exception() is not None for task in done):
                break
    finally:
        for task in pumps:
            task.cancel()
        close_socket(a)
        close_socket(b)
