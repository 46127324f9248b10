"""Telemetry as one service: the metrics sampler and the sandbox logs, fed by the sandbox
lifecycle (it is the sandbox service's ``LifecycleObserver``)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping
from typing import Any, Final

import structlog

from sandgate.config import MetricsConfig, SandboxLogsConfig
from sandgate.errors import SandgateError
from sandgate.guest.client import GuestClient
from sandgate.runtimes import Runtime
from sandgate.store import Sandbox, Store
from sandgate.telemetry.logs import STOP_COLLECT_TIMEOUT_S, SandboxLogs
from sandgate.telemetry.metrics import MetricsSampler

__all__ = ["Telemetry"]

log = structlog.get_logger("sandgate.telemetry")

#: Lifecycle events as log entries: event → (event_type, message).
_EVENTS: Final = {
    "sandbox.created": ("sandbox_created", "Sandbox created"),
    "sandbox.paused": ("sandbox_paused", "Sandbox paused"),
    "sandbox.resumed": ("sandbox_resumed", "Sandbox resumed"),
    "sandbox.killed": ("sandbox_killed", "Sandbox killed"),
}
#: Why a sandbox ended that is worth a warning rather than information.
_ABNORMAL: Final = ("its sandbox stopped on its own", "its runtime sandbox is gone", "lost")


class Telemetry:
    """Owns the sampler's and the log collector's tasks (``start``/``stop``) and turns
    lifecycle events into log entries and first samples."""

    def __init__(
        self,
        metrics: MetricsConfig,
        logs: SandboxLogsConfig,
        store: Store,
        runtime: Runtime,
        guest_of: Callable[[str], GuestClient],
    ) -> None:
        self.sampler = MetricsSampler(metrics, store, runtime)
        self.logs = SandboxLogs(logs, store, guest_of)
        self._pending: set[asyncio.Task[None]] = set()

    async def start(self) -> None:
        await self.sampler.start()
        await self.logs.start()

    async def stop(self) -> None:
        await self.sampler.stop()
        await self.logs.stop()
        if self._pending:
            await asyncio.gather(*self._pending, return_exceptions=True)

    # -- LifecycleObserver ----------------------------------------------------------------

    async def on_event(self, event: str, sandbox: Sandbox, detail: Mapping[str, Any]) -> None:
        known = _EVENTS.get(event)
        if known is None:
            return
        event_type, message = known
        fields = {"event_type": event_type}
        level = "info"
        if event == "sandbox.created":
            fields["template"] = str(detail.get("template", sandbox.alias or ""))
            self.logs.begin(sandbox.id)
        if event == "sandbox.killed":
            reason = str(detail.get("reason", ""))
            fields["reason"] = reason
            message = f"{message}: {reason}" if reason else message
            level = "warn" if any(mark in reason for mark in _ABNORMAL) else "info"
            self.sampler.forget(sandbox.id)
            self.logs.forget(sandbox.id)
        try:
            await self.logs.record(sandbox.id, level, message, fields)
        except SandgateError as exc:
            log.error("logs.write_failed", sandbox=sandbox.id, error=exc.message)
        if event in ("sandbox.created", "sandbox.resumed"):
            self._background(self._first_sample(sandbox))

    async def before_stop(self, sandbox: Sandbox) -> None:
        try:
            await self.logs.collect(sandbox.id, timeout_s=STOP_COLLECT_TIMEOUT_S)
        except SandgateError as exc:
            log.warning("logs.final_collect_failed", sandbox=sandbox.id, error=exc.message)

    # -- helpers --------------------------------------------------------------------------

    async def _first_sample(self, sandbox: Sandbox) -> None:
        """A sample as soon as the sandbox runs, so its metrics are never empty."""
        try:
            await self.sampler.sample([sandbox])
        except SandgateError as exc:
            log.warning("metrics.sample_failed", sandbox=sandbox.id, error=exc.message)

    def _background(self, work: Any) -> None:
        task: asyncio.Task[None] = asyncio.create_task(work)
        self._pending.add(task)
        task.add_done_callback(self._pending.discard)
