"""Small helpers shared by the guest tests."""

from __future__ import annotations

import asyncio
import os
import select
import subprocess
import sys
from collections.abc import Awaitable, Callable, Coroutine
from pathlib import Path
from typing import Any, TypeVar

from sandgate.guest.client import Ended, GuestClient, Output, ProcessStream, Started

T = TypeVar("T")


def probe_guest_pyz(guest_pyz: Path, probe: str) -> str:
    """Runs ``probe`` in a fresh ``python3 -I -S`` with ``guest_pyz`` as ``sys.argv[1]`` (the
    guest's own interpreter flags); returns its stdout. Raises if the probe fails."""
    return subprocess.run(
        [sys.executable, "-I", "-S", "-c", probe, str(guest_pyz)],
        capture_output=True,
        text=True,
        timeout=30,
        check=True,
    ).stdout


def run(coro: Coroutine[Any, Any, T]) -> T:
    return asyncio.run(coro)


async def collect(stream: ProcessStream) -> tuple[bytes, bytes, Ended]:
    """Reads a process stream to its end; returns stdout (or pty), stderr and the end event."""
    out, err = bytearray(), bytearray()
    async for event in stream:
        if isinstance(event, Output):
            (err if event.stream == "stderr" else out).extend(event.data)
        elif isinstance(event, Ended):
            return bytes(out), bytes(err), event
    raise AssertionError("stream ended without an end event")


async def run_cmd(client: GuestClient, script: str, **kwargs: Any) -> tuple[bytes, bytes, Ended]:
    return await collect(await client.spawn("/bin/bash", ["-c", script], **kwargs))


async def read_until(stream: ProcessStream, needle: bytes, seen: bytearray | None = None) -> bytes:
    """Consumes output events until ``needle`` has appeared; returns everything read."""
    buf = seen if seen is not None else bytearray()
    if needle in buf:
        return bytes(buf)
    try:
        async with asyncio.timeout(20):
            async for event in stream:
                if isinstance(event, Output):
                    buf.extend(event.data)
                    if needle in buf:
                        return bytes(buf)
                elif isinstance(event, Ended):
                    raise AssertionError(f"ended before {needle!r}; got {bytes(buf)!r}")
                else:
                    assert isinstance(event, Started)
    except TimeoutError:
        raise AssertionError(f"no {needle!r} within 20 s; got {bytes(buf)!r}") from None
    raise AssertionError("stream closed")


def wait_for_exit(pid: int, timeout: float) -> bool:
    """Blocks on a pidfd until ``pid`` exits (or is already gone); ``False`` on timeout."""
    try:
        fd = os.pidfd_open(pid)
    except ProcessLookupError:
        return True
    try:
        ready, _, _ = select.select([fd], [], [], timeout)
        return bool(ready)
    finally:
        os.close(fd)


def is_alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            state = f.read().rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:
        return False
    return state not in ("Z", "X")


async def eventually(check: Callable[[], Awaitable[bool]], timeout: float = 5.0) -> bool:
    """Re-checks an asynchronous condition until it holds (for effects with no event to wait
    on, such as a worker cleaning up after a dropped connection)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while loop.time() < deadline:
        if await check():
            return True
        await asyncio.sleep(0.02)
    return await check()


def rss_kib(pid: int) -> int:
    total = 0
    for task_pid in [pid, *_children(pid)]:
        with open(f"/proc/{task_pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    total += int(line.split()[1])
    return total


def _children(pid: int) -> list[int]:
    try:
        with open(f"/proc/{pid}/task/{pid}/children") as f:
            return [int(p) for p in f.read().split()]
    except FileNotFoundError:
        return []
