"""Waiting for a sandbox's guest to answer, driven by the guest's socket appearing.

The guest binds its socket under a temporary name and renames it into place once it listens
(``guest/daemon.py``), so the rename is the readiness event. Polling with sleeps would either
burn CPU the guest needs to start or add up to a whole sleep interval of latency to every cold
create; instead the socket's directory is watched with inotify and the guest is probed as soon
as something appears there. A slow periodic probe remains as a safety net (no inotify, an
event lost to a full queue), so correctness never depends on the event arriving.

Trust: the directory is the sandbox's own, writable by its root; an event only triggers a
probe, and only the probe's answer (a ping over the socket) counts as ready.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import os
from collections.abc import Awaitable, Callable
from pathlib import Path

__all__ = ["wait_for_socket"]

_IN_CREATE = 0x100
_IN_MOVED_TO = 0x80
_IN_ONLYDIR = 0x1000000
_IN_NONBLOCK = os.O_NONBLOCK
_IN_CLOEXEC = os.O_CLOEXEC
#: Probe at least this often even without an event.
_FALLBACK_INTERVAL_S = 0.05

_libc: ctypes.CDLL | None = None


def _watch(directory: Path) -> tuple[int, int] | None:
    """An inotify fd and watch for new entries in ``directory``, or None (then we only poll)."""
    global _libc
    try:
        if _libc is None:
            _libc = ctypes.CDLL(None, use_errno=True)
        fd = int(_libc.inotify_init1(_IN_NONBLOCK | _IN_CLOEXEC))
    except (OSError, AttributeError):
        return None
    if fd < 0:
        return None
    mask = _IN_CREATE | _IN_MOVED_TO | _IN_ONLYDIR
    wd = int(_libc.inotify_add_watch(fd, os.fsencode(directory), mask))
    if wd < 0:
        os.close(fd)
        return None
    return fd, wd


def _unwatch(loop: asyncio.AbstractEventLoop, fd: int, wd: int) -> None:
    """Drops the watch at once; closes the fd on a worker thread. Closing an inotify fd waits
    for the kernel to reap its marks (an SRCU grace period, 5-15 ms here), which must not
    stall the event loop; removing the watch does not wait."""
    loop.remove_reader(fd)
    if _libc is not None:
        _libc.inotify_rm_watch(fd, wd)
    try:
        loop.run_in_executor(None, os.close, fd)
    except RuntimeError:  # the loop's executor is shutting down
        os.close(fd)


def _drain(fd: int) -> None:
    with contextlib.suppress(BlockingIOError, InterruptedError):
        while os.read(fd, 4096):
            pass


async def wait_for_socket(
    path: Path, probe: Callable[[], Awaitable[bool]], timeout_s: float
) -> bool:
    """Returns True as soon as ``probe()`` does, False once ``timeout_s`` has passed.

    ``probe`` runs at once, after each new entry in ``path``'s directory, and every
    ``_FALLBACK_INTERVAL_S`` regardless; it must fail fast while ``path`` is missing.
    Cancelling the wait stops the watch.
    """
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    changed = asyncio.Event()
    watch = _watch(path.parent)
    if watch is not None:
        fd = watch[0]

        def on_event() -> None:
            _drain(fd)
            changed.set()

        loop.add_reader(fd, on_event)
    try:
        while True:
            changed.clear()
            if await probe():
                return True
            left = deadline - loop.time()
            if left <= 0:
                return False
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(changed.wait(), min(left, _FALLBACK_INTERVAL_S))
    finally:
        if watch is not None:
            _unwatch(loop, *watch)
