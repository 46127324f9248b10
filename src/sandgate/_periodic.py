"""A background task that does one thing every few seconds until the server stops.

The sandbox reaper, the metrics sampler, the sandbox log collector and the agent runner's
cancel watcher each need the same loop: start a named asyncio task, call a tick, survive the
failures a tick is expected to have (log them, try again next time), wait, and on shutdown
cancel the task and wait for it to end. Written once here, so a fix to that loop (how it waits,
how it stops) is made once and tested once (tests/unit/test_periodic.py).

What a tick does not catch and is not listed in ``errors`` ends the task, as a bug should: it
is logged by asyncio when the task is collected, and re-raised by ``stop``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Generic, TypeVar

from sandgate._tasks import cancel_and_wait

__all__ = ["Periodic"]

E = TypeVar("E", bound=Exception)


class Periodic(Generic[E]):
    """Calls ``tick()`` every ``interval_s()`` seconds in a task named ``name``.

    * ``errors``/``on_error``: a tick that raises one of ``errors`` is reported to
      ``on_error`` (called inside the ``except`` block, so ``log.exception`` sees the
      traceback) and the loop goes on.
    * ``fixed_rate``: when true the wait is ``interval - (time the tick took)`` (at least 0),
      so ticks start every ``interval`` seconds; otherwise the full interval is waited after
      each tick ends.
    * ``wait_first``: wait one interval before the first tick (otherwise tick at once).

    ``interval_s`` is read before each wait, so a live config value is honoured.
    """

    def __init__(
        self,
        name: str,
        tick: Callable[[], Awaitable[object]],
        *,
        interval_s: Callable[[], float],
        errors: type[E] | tuple[type[E], ...],
        on_error: Callable[[E], None],
        fixed_rate: bool = False,
        wait_first: bool = False,
    ) -> None:
        self.name = name
        self._tick = tick
        self._interval_s = interval_s
        self._errors = errors
        self._on_error = on_error
        self._fixed_rate = fixed_rate
        self._wait_first = wait_first
        self._task: asyncio.Task[None] | None = None

    @property
    def running(self) -> bool:
        return self._task is not None and not self._task.done()

    def start(self) -> None:
        """Starts the task on the running loop; a second call while it runs does nothing."""
        if self._task is None:
            self._task = asyncio.create_task(self._run(), name=self.name)

    async def stop(self) -> None:
        """Cancels the task (mid-tick or mid-wait) and waits until it has ended."""
        task, self._task = self._task, None
        if task is not None:
            await cancel_and_wait(task, absorb=())

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        if self._wait_first:
            await asyncio.sleep(self._interval_s())
        while True:
            began = loop.time()
            try:
                await self._tick()
            except self._errors as exc:
                self._on_error(exc)
            wait = self._interval_s()
            if self._fixed_rate:
                wait = max(0.0, wait - (loop.time() - began))
            await asyncio.sleep(wait)
