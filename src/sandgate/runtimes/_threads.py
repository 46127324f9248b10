"""The runtimes' own worker threads for blocking host work (launching bubblewrap, Docker's API,
staging a sandbox's mounts).

Why not ``asyncio.to_thread``: the event loop's default executor has ``cpu_count + 4`` threads
(6 on a 2-core host) shared with everything else that blocks (audit appends, snapshots). A
burst of 20 creates then runs 6 at a time while the other 14 wait for a thread, though each
one mostly waits on a child process or the Docker daemon, not on a core. This pool is sized
for waiting, not for computing, and is the runtimes' alone.
"""

from __future__ import annotations

import asyncio
import contextvars
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

__all__ = ["MAX_WORKERS", "off_loop"]

T = TypeVar("T")

#: Blocking runtime calls in flight at once across the process; more wait for a thread. Also
#: the Docker client's connection pool size, so no call waits for a connection instead.
MAX_WORKERS = 64

_executor: ThreadPoolExecutor | None = None
_lock = threading.Lock()


def _pool() -> ThreadPoolExecutor:
    global _executor
    with _lock:
        if _executor is None:
            _executor = ThreadPoolExecutor(MAX_WORKERS, thread_name_prefix="sandgate-runtime")
        return _executor


async def off_loop(func: Callable[[], T]) -> T:
    """Runs ``func`` in a runtime thread with the caller's context (log fields, trace span),
    as ``asyncio.to_thread`` would."""
    context = contextvars.copy_context()
    return await asyncio.get_running_loop().run_in_executor(_pool(), context.run, func)
