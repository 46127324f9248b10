"""``wait_for_socket``: the probe runs when the socket appears, not on the next poll tick."""

from __future__ import annotations

import asyncio
import os
import socket
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

from sandgate.sandboxes import readiness
from sandgate.sandboxes.readiness import wait_for_socket


def _probe_for(path: Path, calls: list[float]) -> Callable[[], Awaitable[bool]]:
    async def probe() -> bool:
        calls.append(time.monotonic())
        return path.exists()

    return probe


def test_ready_as_soon_as_the_socket_is_renamed_into_place(tmp_path: Path) -> None:
    path = tmp_path / "guest.sock"
    calls: list[float] = []

    async def scenario() -> float:
        loop = asyncio.get_running_loop()

        def publish() -> None:
            temp = tmp_path / "guest.sock.1.tmp"
            listener = socket.socket(socket.AF_UNIX)
            listener.bind(str(temp))
            os.rename(temp, path)
            listener.close()

        # Between fallback probes: an event-driven wait answers well before the next tick.
        loop.call_later(readiness._FALLBACK_INTERVAL_S * 0.3, publish)
        start = time.monotonic()
        assert await wait_for_socket(path, _probe_for(path, calls), 5.0)
        return time.monotonic() - start

    elapsed = asyncio.run(scenario())
    assert elapsed < readiness._FALLBACK_INTERVAL_S * 0.9
    assert len(calls) >= 2


def test_times_out_when_nothing_appears(tmp_path: Path) -> None:
    calls: list[float] = []
    path = tmp_path / "guest.sock"
    ok = asyncio.run(wait_for_socket(path, _probe_for(path, calls), 0.2))
    assert not ok
    assert 2 <= len(calls) <= 10  # the fallback probes, not a busy loop


def test_polls_without_inotify(tmp_path: Path) -> None:
    path = tmp_path / "missing-dir" / "guest.sock"  # no directory to watch: polling only
    calls: list[float] = []

    def publish() -> None:
        path.parent.mkdir()
        path.touch()

    async def scenario() -> bool:
        asyncio.get_running_loop().call_later(0.08, publish)
        return await wait_for_socket(path, _probe_for(path, calls), 2.0)

    assert asyncio.run(scenario())
