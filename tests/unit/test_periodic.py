"""The background loop shared by the reaper, the telemetry collectors and the agent runner.

Driven by events the tick sets and by recording the waits it asks for, never by sleeping: a
loop that died after a failing tick, or a stop that waited out the interval, hangs the test
until its guard fails it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from typing import Any

import pytest

from sandgate import _periodic
from sandgate._periodic import Periodic

#: A hang guard, not a timing assertion: each step here completes in well under a second.
GUARD_S = 30.0


def run(main: Callable[[], Coroutine[Any, Any, None]]) -> None:
    asyncio.run(asyncio.wait_for(main(), GUARD_S))


def test_a_failing_tick_is_reported_and_the_loop_goes_on() -> None:
    async def main() -> None:
        ticks = 0
        reported: list[Exception] = []
        third = asyncio.Event()

        async def tick() -> None:
            nonlocal ticks
            ticks += 1
            if ticks == 3:
                third.set()
            if ticks <= 2:
                raise ValueError(f"tick {ticks} failed")

        periodic = Periodic(
            "test-loop", tick, interval_s=lambda: 0.0, errors=ValueError, on_error=reported.append
        )
        periodic.start()
        await third.wait()
        assert periodic.running
        assert [str(e) for e in reported] == ["tick 1 failed", "tick 2 failed"]
        await periodic.stop()
        assert not periodic.running

    run(main)


def test_stop_ends_the_wait_at_once_and_no_tick_follows() -> None:
    async def main() -> None:
        ticked = asyncio.Event()
        ticks = 0

        async def tick() -> None:
            nonlocal ticks
            ticks += 1
            ticked.set()

        # An hour between ticks: a stop that waited for the next one would trip the guard.
        periodic = Periodic(
            "test-loop", tick, interval_s=lambda: 3600.0, errors=ValueError, on_error=print
        )
        periodic.start()
        await ticked.wait()
        await periodic.stop()
        assert not periodic.running
        for _ in range(10):
            await asyncio.sleep(0)  # let anything still scheduled run
        assert ticks == 1

    run(main)


def test_stop_cancels_a_tick_in_progress() -> None:
    async def main() -> None:
        entered = asyncio.Event()
        cancelled = False

        async def tick() -> None:
            nonlocal cancelled
            entered.set()
            try:
                await asyncio.Event().wait()  # never set
            except asyncio.CancelledError:
                cancelled = True
                raise

        periodic = Periodic(
            "test-loop", tick, interval_s=lambda: 0.0, errors=ValueError, on_error=print
        )
        periodic.start()
        await entered.wait()
        await periodic.stop()
        assert cancelled

    run(main)


def test_an_unlisted_error_ends_the_loop_and_stop_raises_it() -> None:
    async def main() -> None:
        async def tick() -> None:
            raise KeyError("a bug")

        periodic = Periodic(
            "test-loop", tick, interval_s=lambda: 0.0, errors=ValueError, on_error=print
        )
        periodic.start()
        while periodic.running:
            await asyncio.sleep(0)
        with pytest.raises(KeyError, match="a bug"):
            await periodic.stop()

    run(main)


def test_start_twice_runs_one_task_and_restart_after_stop_works() -> None:
    async def main() -> None:
        ticks = 0
        second = asyncio.Event()

        async def tick() -> None:
            nonlocal ticks
            ticks += 1
            second.set()

        periodic = Periodic(
            "test-loop", tick, interval_s=lambda: 3600.0, errors=ValueError, on_error=print
        )
        periodic.start()
        periodic.start()
        await second.wait()
        await asyncio.sleep(0)
        assert ticks == 1
        assert [t.get_name() for t in asyncio.all_tasks()].count("test-loop") == 1
        await periodic.stop()
        second.clear()
        periodic.start()
        await second.wait()
        assert ticks == 2
        await periodic.stop()

    run(main)


def test_waits_fixed_delay_fixed_rate_and_wait_first(monkeypatch: pytest.MonkeyPatch) -> None:
    """The order of waits and ticks, and how long each wait is asked to be."""
    real_sleep = asyncio.sleep

    def scenario(*, fixed_rate: bool, wait_first: bool) -> list[str | float]:
        events: list[str | float] = []

        async def recorded_sleep(delay: float) -> None:
            events.append(delay)
            await real_sleep(0)

        async def main() -> None:
            done = asyncio.Event()

            async def tick() -> None:
                events.append("tick")
                loop = asyncio.get_running_loop()
                began = loop.time()
                while loop.time() == began:  # the tick takes measurable time
                    pass
                if events.count("tick") == 2:
                    done.set()

            monkeypatch.setattr(_periodic.asyncio, "sleep", recorded_sleep)
            periodic = Periodic(
                "test-loop",
                tick,
                interval_s=lambda: 1000.0,
                errors=ValueError,
                on_error=print,
                fixed_rate=fixed_rate,
                wait_first=wait_first,
            )
            periodic.start()
            await done.wait()
            await periodic.stop()
            monkeypatch.setattr(_periodic.asyncio, "sleep", real_sleep)

        run(main)
        return events[: events.index("tick", events.index("tick") + 1) + 1]

    assert scenario(fixed_rate=False, wait_first=False) == ["tick", 1000.0, "tick"]
    assert scenario(fixed_rate=False, wait_first=True) == [1000.0, "tick", 1000.0, "tick"]
    rate = scenario(fixed_rate=True, wait_first=False)
    assert rate[0] == "tick" and rate[2] == "tick"
    assert isinstance(rate[1], float) and 0.0 <= rate[1] < 1000.0
