"""Stopping a background task without losing the cancellation of the one stopping it.

asyncio raises the same ``CancelledError`` for "the task you awaited was cancelled" and for
"you were cancelled". The usual idiom, ``task.cancel()`` then ``await task`` under
``suppress(CancelledError)``, therefore also swallows a cancel aimed at the caller: a request
handler or agent run cancelled while it stops a helper task carries on as if nothing happened.
``asyncio.wait`` never raises what the awaited task raised, only the caller's own
cancellation, so waiting through it tells the two apart.

(The same confusion is why nothing here uses ``asyncio.wait_for`` on Python 3.11: when the
awaited work finishes in the same loop turn as a cancel of the caller, it returns the result
and the cancel is lost, CPython gh-86296. ``asyncio.timeout`` has no such window.
tests/unit/test_tasks.py checks both.)
"""

from __future__ import annotations

import asyncio
from typing import Any

__all__ = ["cancel_and_wait", "wait_quietly"]


async def wait_quietly(task: asyncio.Future[Any]) -> None:
    """Waits until ``task`` has ended, however it ended, without cancelling it; raises only
    when the caller itself is cancelled (the task then goes on)."""
    await asyncio.wait([task])
    if not task.cancelled():
        task.exception()  # retrieved: its outcome is the task's own business


async def cancel_and_wait(
    task: asyncio.Future[Any], *, absorb: tuple[type[BaseException], ...] = (Exception,)
) -> None:
    """Cancels ``task`` and waits until it has ended. What the task raised on its way out is
    dropped when it is an ``absorb`` type (by default any ``Exception``: it is being stopped)
    and re-raised otherwise; a cancel of the caller always propagates."""
    task.cancel()
    await asyncio.wait([task])
    if task.cancelled():
        return
    error = task.exception()
    if error is not None and not isinstance(error, absorb):
        raise error
