"""The guest's own event loop (``_loop``): the subset of an event loop the daemon runs on.

Each test drives a real loop over real sockets and pipes; timings are only orderings (which
timer fires first), never durations asserted against a clock.
"""

from __future__ import annotations

import json
import os
import socket
from pathlib import Path

import pytest

from sandgate.guest import _loop
from sandgate.guest._loop import (
    BufferedSender,
    Cancelled,
    Event,
    Future,
    Lock,
    get_loop,
    readable,
    run,
    sleep,
    sock_accept,
    sock_connect,
    sock_recv,
    sock_sendall,
    spawn,
    wait_first,
    wait_for,
)
from sandgate.guest._splice import splice

from .helpers import probe_guest_pyz


def test_timers_fire_in_deadline_order_and_a_cancelled_one_never() -> None:
    fired: list[str] = []

    async def main() -> None:
        loop = get_loop()
        loop.call_later(0.03, fired.append, "late")
        loop.call_later(0.01, fired.append, "early")
        cancelled = loop.call_later(0.02, fired.append, "cancelled")
        loop.call_soon(fired.append, "soon")
        cancelled.cancel()
        await sleep(0.05)

    run(main())
    assert fired == ["soon", "early", "late"]


def test_reader_callback_runs_when_the_fd_is_readable_and_not_after_removal() -> None:
    seen: list[bytes] = []

    async def main() -> None:
        loop = get_loop()
        r, w = os.pipe()
        os.set_blocking(r, False)
        got: Future[None] = loop.create_future()

        def on_readable() -> None:
            seen.append(os.read(r, 100))
            loop.remove_reader(r)
            got.set_result(None)

        loop.add_reader(r, on_readable)
        os.write(w, b"ping")
        await got
        os.write(w, b"again")  # no reader any more: nothing may be read
        await sleep(0.02)
        assert os.read(r, 100) == b"again"
        os.close(r)
        os.close(w)

    run(main())
    assert seen == [b"ping"]


def test_reader_and_writer_on_one_fd_are_independent() -> None:
    async def main() -> None:
        loop = get_loop()
        a, b = socket.socketpair()
        a.setblocking(False)
        wrote: Future[None] = loop.create_future()
        loop.add_writer(a.fileno(), lambda: wrote.done() or wrote.set_result(None))
        reading = spawn(readable(a.fileno()))
        await wrote
        loop.remove_writer(a.fileno())
        assert not reading.done()
        b.send(b"x")
        await reading
        a.close()
        b.close()

    run(main())


def test_cancelling_a_task_raises_cancelled_at_its_await_and_propagates_inward() -> None:
    events: list[str] = []

    async def inner() -> None:
        try:
            await Event().wait()
        except Cancelled:
            events.append("inner cancelled")
            raise

    async def outer() -> None:
        try:
            await spawn(inner())
        except Cancelled:
            events.append("outer cancelled")
            raise

    async def main() -> None:
        task = spawn(outer())
        await sleep(0.01)
        assert task.cancel()
        with pytest.raises(Cancelled):
            await task
        assert task.cancelled()

    run(main())
    assert events == ["inner cancelled", "outer cancelled"]


def test_a_task_cancelled_before_it_starts_never_runs() -> None:
    ran: list[bool] = []

    async def body() -> None:
        ran.append(True)

    async def main() -> None:
        task = spawn(body())
        task.cancel()
        await wait_first([task])
        assert task.cancelled()

    run(main())
    assert ran == []


def test_wait_for_raises_timeout_error_and_cancels_the_awaited() -> None:
    async def main() -> None:
        never = Event()
        cancelled: list[bool] = []

        async def stuck() -> None:
            try:
                await never.wait()
            except Cancelled:
                cancelled.append(True)
                raise

        with pytest.raises(TimeoutError):
            await wait_for(stuck(), 0.01)
        assert cancelled == [True]
        assert await wait_for(_value(7), 1.0) == 7

    run(main())


async def _value(value: int) -> int:
    await sleep(0)
    return value


def test_wait_first_returns_on_the_first_done_and_cancels_nothing() -> None:
    async def main() -> None:
        slow = spawn(sleep(10))
        fast = spawn(sleep(0.01))
        await wait_first([slow, fast])
        assert fast.done() and not slow.done()
        slow.cancel()

    run(main())


def test_an_exception_in_one_task_is_logged_and_the_loop_goes_on(
    capfd: pytest.CaptureFixture[str],
) -> None:
    async def fails() -> None:
        raise ValueError("boom")

    def callback_fails() -> None:
        raise KeyError("bang")

    async def main() -> str:
        spawn(fails())
        get_loop().call_soon(callback_fails)
        await sleep(0.01)
        return "still running"

    assert run(main()) == "still running"
    events = [json.loads(line) for line in capfd.readouterr().err.splitlines()]
    assert [e["event"] for e in events] == ["task_failed", "callback_failed"]
    assert "boom" in events[0]["error"] and "bang" in events[1]["error"]


def test_an_awaited_failure_is_raised_to_the_awaiter_not_logged(
    capfd: pytest.CaptureFixture[str],
) -> None:
    async def fails() -> None:
        await sleep(0)
        raise ValueError("boom")

    async def main() -> None:
        with pytest.raises(ValueError, match="boom"):
            await spawn(fails())

    run(main())
    assert capfd.readouterr().err == ""


def test_event_wakes_every_waiter_and_lock_is_first_come_first_served() -> None:
    order: list[int] = []

    async def main() -> None:
        event = Event()
        waiters = [spawn(event.wait()) for _ in range(3)]
        await sleep(0)
        event.set()
        for waiter in waiters:
            await waiter
        assert event.is_set()

        lock = Lock()

        async def hold(n: int) -> None:
            async with lock:
                order.append(n)
                await sleep(0.001)

        tasks = [spawn(hold(n)) for n in range(4)]
        for task in tasks:
            await task
        assert not lock.locked()

    run(main())
    assert order == [0, 1, 2, 3]


def test_a_signal_runs_its_handler_on_the_loop() -> None:
    import signal

    async def main() -> None:
        got = Event()
        get_loop().add_signal_handler(signal.SIGUSR1, got.set)
        os.kill(os.getpid(), signal.SIGUSR1)
        await wait_for(got.wait(), 10)

    run(main())
    assert signal.getsignal(signal.SIGUSR1) == signal.SIG_DFL  # closing the loop restores it


def test_sockets_accept_connect_send_and_receive() -> None:
    async def main() -> None:
        listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        listener.setblocking(False)
        client = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        client.setblocking(False)
        accepting = spawn(sock_accept(listener))
        await sock_connect(client, listener.getsockname())
        server, _ = await accepting
        big = os.urandom(4 * 1024 * 1024)  # more than the socket buffers: sendall must wait
        sending = spawn(sock_sendall(client, big))
        got = bytearray()
        while len(got) < len(big):
            got += await sock_recv(server, 65536)
        await sending
        assert bytes(got) == big
        for sock in (listener, client, server):
            sock.close()

    run(main())


def test_connect_to_a_closed_port_raises_oserror() -> None:
    async def main() -> None:
        probe = socket.socket()
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
        probe.close()
        client = socket.socket()
        client.setblocking(False)
        with pytest.raises(ConnectionRefusedError):
            await sock_connect(client, ("127.0.0.1", port))
        client.close()

    run(main())


def test_buffered_sender_keeps_what_the_socket_refuses_and_drains_it() -> None:
    async def main() -> None:
        a, b = socket.socketpair()
        a.setblocking(False)
        b.setblocking(False)
        sender = BufferedSender(a)
        payload = os.urandom(2 * 1024 * 1024)
        sender.write(payload)
        assert sender.pending > 0  # more than a socketpair buffers
        reader = spawn(_read_all(b, len(payload)))
        await sender.drain()
        assert sender.pending == 0
        assert await reader == payload
        await sender.close(1.0)
        assert sender.closed and sender.lost.done()
        b.close()

    run(main())


def test_buffered_sender_close_aborts_a_peer_that_never_reads() -> None:
    async def main() -> None:
        a, b = socket.socketpair()
        a.setblocking(False)
        sender = BufferedSender(a)
        sender.write(os.urandom(2 * 1024 * 1024))
        await sender.close(0.05)
        assert sender.closed and sender.pending == 0
        with pytest.raises(ConnectionResetError):
            await sender.drain()
        b.close()

    run(main())


async def _read_all(sock: socket.socket, size: int) -> bytes:
    got = bytearray()
    while len(got) < size:
        chunk = await sock_recv(sock, 65536)
        assert chunk
        got += chunk
    return bytes(got)


def test_splice_copies_both_ways_and_passes_end_of_file_on() -> None:
    async def main() -> None:
        left_outer, left_inner = socket.socketpair()
        right_inner, right_outer = socket.socketpair()
        for sock in (left_outer, left_inner, right_inner, right_outer):
            sock.setblocking(False)
        relay = spawn(splice(left_inner, right_inner))
        await sock_sendall(left_outer, b"hello")
        assert await _read_all(right_outer, 5) == b"hello"
        await sock_sendall(right_outer, b"world")
        assert await _read_all(left_outer, 5) == b"world"
        left_outer.shutdown(socket.SHUT_WR)
        assert await sock_recv(right_outer, 10) == b""  # EOF passed on
        right_outer.shutdown(socket.SHUT_WR)
        assert await sock_recv(left_outer, 10) == b""
        await relay
        assert left_inner.fileno() == -1 and right_inner.fileno() == -1
        left_outer.close()
        right_outer.close()

    run(main())


def test_no_loop_outside_run() -> None:
    with pytest.raises(RuntimeError, match="no guest loop"):
        get_loop()
    assert _loop._current is None


def test_the_loop_imports_only_what_the_daemon_already_loads(guest_pyz: Path) -> None:
    probe = (
        "import sys\n"
        "sys.path.insert(0, sys.argv.pop(1))\n"
        "import sandgate.guest._loop\n"
        "print(sorted(m for m in ('asyncio', 'concurrent', 'logging', 'threading')"
        " if m in sys.modules))\n"
    )
    assert probe_guest_pyz(guest_pyz, probe).strip() == "[]"
