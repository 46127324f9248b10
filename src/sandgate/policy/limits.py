"""Rate limits (calls per sliding window per key) and per-sandbox call budgets.

Both live in the gateway's memory: a restart forgets the counts, which errs towards letting
calls through again after an operator action, never towards skipping a policy decision.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Hashable


class RateLimiter:
    """A sliding-window log per key; ``acquire`` counts the call only when it is admitted."""

    def __init__(self) -> None:
        self._calls: dict[Hashable, deque[float]] = {}

    def acquire(self, key: Hashable, calls: int, window_s: float, now: float) -> bool:
        """Admits and records a call at ``now`` unless ``calls`` were made in the window."""
        log = self._calls.setdefault(key, deque())
        while log and log[0] <= now - window_s:
            log.popleft()
        if len(log) >= calls:
            return False
        log.append(now)
        return True

    def forget(self, head: tuple[Hashable, ...]) -> None:
        """Drops the windows of tuple keys that start with ``head`` (a finished sandbox's)."""
        size = len(head)
        for key in [k for k in self._calls if isinstance(k, tuple) and k[:size] == head]:
            del self._calls[key]


class CallBudget:
    """Counts the calls each sandbox has been allowed; refuses once ``limit`` is spent."""

    def __init__(self, limit: int | None) -> None:
        self._limit = limit
        self._spent: dict[str, int] = {}

    def spend(self, sandbox_id: str) -> bool:
        if self._limit is None:
            return True
        spent = self._spent.get(sandbox_id, 0)
        if spent >= self._limit:
            return False
        self._spent[sandbox_id] = spent + 1
        return True

    def forget(self, sandbox_id: str) -> None:
        self._spent.pop(sandbox_id, None)
