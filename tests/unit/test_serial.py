"""``SerialWorker``: a loop's blocking calls run in turn on one thread of their own, results
and errors come back to the caller, and a caller that stops waiting neither stops its call
nor leaves the loop an error to report."""

from __future__ import annotations

import asyncio
import contextvars
import threading
from typing import Any

import pytest

from sandgate._serial import SerialWorker

_who: contextvars.ContextVar[str] = contextvars.ContextVar("who", default="nobody")


def _loop_errors(loop: asyncio.AbstractEventLoop) -> list[dict[str, Any]]:
    errors: list[dict[str, Any]] = []
    loop.set_exception_handler(lambda _loop, context: errors.append(context))
    return errors


def test_calls_run_in_turn_on_the_workers_thread_with_the_callers_context() -> None:
    worker = SerialWorker("sandgate-test-serial")
    seen: list[tuple[int, str, str]] = []
    running = threading.Lock()

    def job(n: int) -> int:
        assert running.acquire(blocking=False), "two calls ran at once"
        try:
            seen.append((n, threading.current_thread().name, _who.get()))
            return n * n
        finally:
            running.release()

    async def main() -> tuple[list[int], str]:
        _who.set("caller")
        results = await asyncio.gather(*(worker.run(lambda n=n: job(n)) for n in range(20)))
        return list(results), threading.current_thread().name

    results, loop_thread = asyncio.run(main())
    assert results == [n * n for n in range(20)]
    assert [n for n, _, _ in seen] == list(range(20))  # in the order they were handed over
    assert {name for _, name, _ in seen} == {"sandgate-test-serial"} != {loop_thread}
    assert {who for _, _, who in seen} == {"caller"}


def test_an_error_reaches_the_caller_and_the_worker_goes_on() -> None:
    worker = SerialWorker("sandgate-test-serial")

    def fail() -> None:
        raise ValueError("the call's own error")

    async def main() -> int:
        with pytest.raises(ValueError, match="the call's own error"):
            await worker.run(fail)
        return await worker.run(lambda: 7)

    assert asyncio.run(main()) == 7


def test_a_cancelled_caller_does_not_stop_its_call_and_leaves_no_loop_error() -> None:
    worker = SerialWorker("sandgate-test-serial")
    started, release, done = threading.Event(), threading.Event(), threading.Event()

    def slow() -> str:
        started.set()
        release.wait(30)
        done.set()
        return "finished"

    async def main() -> list[dict[str, Any]]:
        errors = _loop_errors(asyncio.get_running_loop())
        task = asyncio.ensure_future(worker.run(slow))
        await asyncio.to_thread(started.wait, 30)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        release.set()
        # The next call runs after the cancelled one has finished and been settled.
        assert await worker.run(lambda: "next") == "next"
        await asyncio.sleep(0)
        return errors

    assert asyncio.run(main()) == []
    assert done.is_set()
