"""Output floods from hostile sandboxes (security.md §2.3 RES-11), over raw HTTP.

A flood is either delivered (a reader that keeps up gets every byte, base64 in JSON, correctly
encoded) or held back by backpressure (a reader that stalls makes the process wait); in both
cases the gateway's resident memory stays flat, no request hangs or fails with 500, and a
neighbour sandbox keeps answering ``echo ok`` quickly.
"""

from __future__ import annotations

import contextlib
import threading
import time
from typing import Any

import httpx
import pytest

from tests.fixtures.server import RunningServer
from tests.framework.sandbox_http import (
    Envelopes,
    SandboxHttp,
    rss_bytes,
    wait_for,
)

pytestmark = pytest.mark.docker

MiB = 1024 * 1024
#: Gateway RSS growth allowed while a sandbox floods (the baseline is ~100 MiB).
RSS_BUDGET = 64 * MiB
FLOOD_BYTES = 200 * MiB


def _server_pid(server: RunningServer) -> int:
    assert server.process is not None, "the shared server is not running"
    return server.process.pid


class Neighbour:
    """Runs ``echo ok`` in another sandbox over and over on a thread, recording when each run
    started and ended. A gateway whose event loop a flood blocks would finish none of them
    while the flood lasts; how long each takes depends on the machine's load, so only
    progress is asserted, never a latency."""

    def __init__(self, sandbox: SandboxHttp) -> None:
        self.sandbox = sandbox
        self.runs: list[tuple[float, float]] = []
        self.failures: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        while not self._stop.is_set():
            started = time.monotonic()
            result = self.sandbox.run("echo ok")
            self.runs.append((started, time.monotonic()))
            if result.stdout != "ok\n":
                self.failures.append(repr(result))

    def stop(self, *, flood: tuple[float, float]) -> None:
        """Stops, and asserts every run succeeded and at least one ran wholly within
        ``flood`` (monotonic start and end of the flood)."""
        self._stop.set()
        self._thread.join(60)
        assert not self.failures, self.failures
        within = [r for r in self.runs if flood[0] <= r[0] and r[1] <= flood[1]]
        assert within, f"no neighbour command finished during the flood: {self.runs}"


def _start_body(command: str) -> dict[str, Any]:
    return {"process": {"cmd": "/bin/bash", "args": ["-l", "-c", command]}, "stdin": False}


def test_RES_11_binary_flood_is_delivered_and_rss_stays_flat(
    sbx: SandboxHttp, neighbour: SandboxHttp, sandgate_server: RunningServer
) -> None:
    pid = _server_pid(sandgate_server)
    before = rss_bytes(pid)
    peak = before
    watcher = Neighbour(neighbour)
    received, end, end_error = 0, None, None
    splitter = Envelopes()
    flood_start = time.monotonic()
    with sbx.stream(
        "process.Process/Start",
        _start_body(f"head -c {FLOOD_BYTES} /dev/urandom"),
        timeout=120,
    ) as response:
        assert response.status_code == 200
        for chunk in response.iter_bytes():
            for flags, message in splitter.feed(chunk):
                if flags & 0x02:
                    end_error = message.get("error")
                    continue
                event = message.get("event", {})
                if "data" in event:
                    received += len(event["data"].get("stdout", "")) * 3 // 4
                end = event.get("end", end)
            peak = max(peak, rss_bytes(pid))
    watcher.stop(flood=(flood_start, time.monotonic()))
    assert end_error is None and end is not None and end.get("exitCode", 0) == 0, end
    # base64 length * 3/4 over-counts by at most 2 bytes per chunk of padding.
    assert FLOOD_BYTES - received < 32 * 1024, received
    assert peak - before < RSS_BUDGET, f"gateway RSS grew {(peak - before) / MiB:.0f} MiB"


def test_RES_11_yes_with_a_stalled_reader_is_held_back(
    sbx: SandboxHttp, neighbour: SandboxHttp, sandgate_server: RunningServer
) -> None:
    pid = _server_pid(sandgate_server)
    before = rss_bytes(pid)
    watcher = Neighbour(neighbour)
    splitter = Envelopes()
    flood_pid = None
    with sbx.stream("process.Process/Start", _start_body("yes"), timeout=60) as response:
        assert response.status_code == 200
        stream = response.iter_bytes()
        while flood_pid is None:
            for _, message in splitter.feed(next(stream)):
                flood_pid = message.get("event", {}).get("start", {}).get("pid", flood_pid)
        # Stall: read nothing while watching the gateway's memory for three seconds.
        peak = before
        stalled = time.monotonic()
        deadline = stalled + 3.0
        while time.monotonic() < deadline:
            peak = max(peak, rss_bytes(pid))
            time.sleep(0.1)
        # The reader resumes and still gets data.
        assert next(stream), "the stream died while the reader stalled"
        watcher.stop(flood=(stalled, time.monotonic()))
    assert peak - before < RSS_BUDGET, f"gateway RSS grew {(peak - before) / MiB:.0f} MiB"

    # The client left; the process keeps running (disconnect never kills) until killed.
    killed = sbx.rpc(
        "process.Process/SendSignal",
        {"process": {"pid": flood_pid}, "signal": "SIGNAL_SIGKILL"},
    )
    assert killed.status_code == 200, killed.text
    guest_rss_kib = sbx.sh("ps -o rss= -C python3 | sort -n | tail -1", user="root")
    assert int(guest_rss_kib) * 1024 < RSS_BUDGET, f"guest daemon RSS {guest_rss_kib} KiB"


def test_RES_11_output_nobody_reads_is_not_retained(
    sbx: SandboxHttp, sandgate_server: RunningServer
) -> None:
    """Output produced while no stream is subscribed is discarded (as envd does): the process
    is not blocked by it and a late Connect replays no backlog."""
    pid = _server_pid(sandgate_server)
    before = rss_bytes(pid)
    splitter = Envelopes()
    flood_pid = None
    command = "yes | head -c 300M; echo done > /tmp/flood-done; sleep 30"
    with sbx.stream("process.Process/Start", _start_body(command)) as response:
        for chunk in response.iter_bytes():
            for _, message in splitter.feed(chunk):
                flood_pid = message.get("event", {}).get("start", {}).get("pid", flood_pid)
            if flood_pid is not None:
                break
    wait_for(
        lambda: sbx.get_file("/tmp/flood-done").status_code == 200,
        60,
        "300 MiB of unread output to be produced (it must not block the process)",
    )
    backlog = 0
    # The process now only sleeps: whatever arrives before two silent seconds is backlog.
    with sbx.stream(
        "process.Process/Connect", {"process": {"pid": flood_pid}}, timeout=2
    ) as response:
        assert response.status_code == 200
        splitter = Envelopes()
        with contextlib.suppress(httpx.ReadTimeout):
            for chunk in response.iter_bytes():
                for _, message in splitter.feed(chunk):
                    backlog += len(message.get("event", {}).get("data", {}).get("stdout", ""))
    assert backlog < 4 * MiB, f"{backlog} bytes of old output were retained and replayed"
    assert rss_bytes(pid) - before < RSS_BUDGET
    killed = sbx.rpc(
        "process.Process/SendSignal",
        {"process": {"pid": flood_pid}, "signal": "SIGNAL_SIGKILL"},
    )
    assert killed.status_code == 200, killed.text


def test_RES_11_invalid_utf8_output_arrives_byte_exact(sbx: SandboxHttp) -> None:
    result = sbx.start("printf 'x\\xff\\xfey\\n'; printf '\\xc3' >&2; printf '\\x28\\n' >&2")
    assert result.end_error is None and result.end is not None, result
    assert result.stdout == b"x\xff\xfey\n"
    assert result.stderr == b"\xc3(\n"


@pytest.mark.parametrize("method", ["process.Process/Connect", "filesystem.Filesystem/WatchDir"])
def test_RES_streams_end_at_their_connect_deadline(sbx: SandboxHttp, method: str) -> None:
    """``connect-timeout-ms`` bounds a Connect or WatchDir stream (e2b-protocol.md §3.1): the
    server ends it with ``deadline_exceeded`` instead of holding it open indefinitely."""
    sleeper = sbx.stream("process.Process/Start", _start_body("sleep 20"))
    with sleeper as response:
        splitter = Envelopes()
        pid = None
        for chunk in response.iter_bytes():
            for _, message in splitter.feed(chunk):
                pid = message.get("event", {}).get("start", {}).get("pid", pid)
            if pid is not None:
                break
    body = {"process": {"pid": pid}} if method.startswith("process") else {"path": "/tmp"}
    end_error = None
    with sbx.stream(method, body, headers={"connect-timeout-ms": "1500"}, timeout=10) as r:
        assert r.status_code == 200
        splitter = Envelopes()
        with contextlib.suppress(httpx.ReadTimeout):
            for chunk in r.iter_bytes():
                for flags, message in splitter.feed(chunk):
                    if flags & 0x02:
                        end_error = message.get("error")
    sbx.rpc("process.Process/SendSignal", {"process": {"pid": pid}, "signal": "SIGNAL_SIGKILL"})
    # The server ended the stream at its deadline (the client's own 10 s read timeout would
    # leave no end message); how soon after 1.5 s depends on the machine's load.
    assert end_error is not None and end_error["code"] == "deadline_exceeded", end_error
