"""Helpers shared by the ``data_*`` scenarios (data plane, issue 3); standard library only."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

from _common import describe_error

POLL_INTERVAL_S = 0.1


def poll(check: Callable[[], Any], timeout: float = 10.0) -> Any:
    """Calls ``check`` until it returns something truthy or ``timeout`` passes; returns the last
    value (falsy on timeout). Exceptions from ``check`` count as falsy."""
    deadline = time.monotonic() + timeout
    value: Any = None
    while True:
        try:
            value = check()
        except Exception:
            value = None
        if value or time.monotonic() >= deadline:
            return value
        time.sleep(POLL_INTERVAL_S)


def outcome(action: Callable[[], Any]) -> dict[str, Any]:
    """Like ``attempt`` but records the elapsed time too."""
    started = time.monotonic()
    try:
        value = action()
        return {"ok": True, "value": value, "elapsed": time.monotonic() - started}
    except Exception as exc:
        return {
            "ok": False,
            "error": describe_error(exc),
            "elapsed": time.monotonic() - started,
        }


class Waiter:
    """Runs ``handle.wait(...)`` on a thread (the sync SDK only delivers callbacks inside it) and
    records output chunks with their arrival time."""

    def __init__(self, handle: Any, *, pty: bool = False) -> None:
        self.handle = handle
        self.started = time.monotonic()
        self.chunks: list[dict[str, Any]] = []
        self.pty_bytes = bytearray()
        self.result: dict[str, Any] | None = None
        self._lock = threading.Lock()
        kwargs: dict[str, Any] = {}
        if pty:
            kwargs["on_pty"] = self._on_pty
        else:
            kwargs["on_stdout"] = lambda d: self._on("stdout", d)
            kwargs["on_stderr"] = lambda d: self._on("stderr", d)
        self._thread = threading.Thread(target=self._run, args=(kwargs,), daemon=True)
        self._thread.start()

    def _on(self, stream: str, data: str) -> None:
        with self._lock:
            self.chunks.append(
                {"t": time.monotonic() - self.started, "stream": stream, "data": data}
            )

    def _on_pty(self, data: bytes) -> None:
        with self._lock:
            self.pty_bytes.extend(data)

    def _run(self, kwargs: dict[str, Any]) -> None:
        self.result = outcome(lambda: _result(self.handle.wait(**kwargs)))
        self.result["t"] = time.monotonic() - self.started

    def pty_text(self) -> str:
        with self._lock:
            return self.pty_bytes.decode("utf-8", "replace")

    def stdout(self) -> str:
        with self._lock:
            return "".join(c["data"] for c in self.chunks if c["stream"] == "stdout")

    def join(self, timeout: float = 30.0) -> dict[str, Any]:
        self._thread.join(timeout)
        if self.result is None:
            return {"ok": False, "error": {"class": "ScenarioTimeout", "classes": []}}
        return self.result


def _result(result: Any) -> dict[str, Any]:
    return {
        "stdout": result.stdout,
        "stderr": result.stderr,
        "exit_code": result.exit_code,
        "error": result.error,
    }
