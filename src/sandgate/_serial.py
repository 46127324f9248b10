"""One thread that runs an event loop's blocking calls in turn, handed over cheaply.

``asyncio.to_thread`` is right for occasional blocking work. A tool that is called thousands
of times a second (the builtin ``kv``) pays, per call, a lock-backed
``concurrent.futures.Future``, the default pool's bookkeeping and a chained loop future: on
this machine kind about a tenth of the gateway's time in a ``kv get`` pass. Work that is
serialised anyway (``kv`` holds one SQLite connection under a lock) gains nothing from a pool:
here each call is one queue put, and its result comes back to the loop's own future through
one ``call_soon_threadsafe``.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import queue
import threading
from collections.abc import Callable
from typing import Any, TypeVar

__all__ = ["SerialWorker"]

T = TypeVar("T")

_Job = tuple[contextvars.Context, Callable[[], Any], "asyncio.Future[Any]"]


class SerialWorker:
    """Runs ``func`` (with the caller's context, as ``to_thread`` does) on its own daemon
    thread, one call after the other. A caller that stops waiting does not stop its call."""

    def __init__(self, name: str) -> None:
        self._name = name
        self._queue: queue.SimpleQueue[_Job] = queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()

    async def run(self, func: Callable[[], T]) -> T:
        future: asyncio.Future[T] = asyncio.get_running_loop().create_future()
        self._ensure_thread()
        self._queue.put((contextvars.copy_context(), func, future))
        return await future

    def _ensure_thread(self) -> None:
        thread = self._thread
        if thread is not None and thread.is_alive():
            return
        with self._lock:
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._serve, name=self._name, daemon=True)
                self._thread.start()

    def _serve(self) -> None:
        while True:
            context, func, future = self._queue.get()
            try:
                result, error = context.run(func), None
            except BaseException as exc:  # handed to the caller, whatever it is
                result, error = None, exc
            # A closed loop (RuntimeError) leaves nobody to tell.
            with contextlib.suppress(RuntimeError):
                future.get_loop().call_soon_threadsafe(_settle, future, result, error)


def _settle(future: asyncio.Future[Any], result: Any, error: BaseException | None) -> None:
    if future.done():  # the caller was cancelled; its call ran all the same
        return
    if error is not None:
        future.set_exception(error)
    else:
        future.set_result(result)
