"""Sandbox metrics (E2B's ``SandboxMetric``): one task samples every running sandbox.

Every ``metrics.interval_s`` the sampler asks the runtime for one reading of all running
sandboxes at once (``Runtime.stats``: cgroup counters and the disk's ``statvfs``, read in one
worker thread) and writes one row per sandbox in one transaction (also off the event loop).
Rows older than ``metrics.retention_hours`` are deleted once a minute.

What a sample says (E2B's field names):

* ``cpuCount``: the sandbox's CPUs (its limit); ``cpuUsedPct``: CPU time used since the
  previous sample over the wall time between them, as a share of those CPUs (0-100). With no
  previous reading (the first sample, or the first after a gateway restart) it is the average
  since the sandbox started.
* ``memTotal``: the memory the sandbox was given (``memoryMB``); ``memUsed``: what its cgroup
  is charged, less page cache; ``memCache``: page cache, less the sandbox's disk (which lives
  in memory and is reported as disk).
* ``diskTotal``/``diskUsed``: its disk, the tmpfs of ``limits.disk_mib`` its copy-on-write
  layer lives on.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence

import structlog

from sandgate._periodic import Periodic
from sandgate.config import MetricsConfig
from sandgate.errors import SandgateError
from sandgate.runtimes import Runtime, SandboxStats
from sandgate.store import Sandbox, SandboxMetricSample, Store, TelemetryRecords

__all__ = ["MetricsSampler", "to_sample"]

log = structlog.get_logger("sandgate.telemetry")

_MIB = 1024 * 1024
_PRUNE_INTERVAL_S = 60.0


class MetricsSampler:
    """Samples running sandboxes on a timer (``start``/``stop``) and on demand (``sample``)."""

    def __init__(self, config: MetricsConfig, store: Store, runtime: Runtime) -> None:
        self._config = config
        self._store = store
        self._records = TelemetryRecords(store)
        self._runtime = runtime
        self._last: dict[str, SandboxStats] = {}
        self._lock = asyncio.Lock()
        self._loop = Periodic(
            "metrics-sampler",
            self._tick,
            interval_s=lambda: self._config.interval_s,
            errors=SandgateError,
            on_error=lambda exc: log.warning("metrics.sample_failed", error=exc.message),
            fixed_rate=True,
        )
        self._pruned = 0.0

    async def start(self) -> None:
        self._pruned = asyncio.get_running_loop().time()
        self._loop.start()

    async def stop(self) -> None:
        await self._loop.stop()

    async def sample(self, rows: Sequence[Sandbox]) -> int:
        """Reads the sandboxes of ``rows`` once and stores a sample of each that runs here;
        returns how many were stored. Raises ``SandgateError`` (runtime, store)."""
        mine = [row for row in rows if row.runtime == self._runtime.name]
        if not mine:
            return 0
        async with self._lock:  # readings must arrive in order for the CPU deltas
            readings = await self._runtime.stats([row.id for row in mine])
            now_ms = int(time.time() * 1000)
            samples = []
            for row in mine:
                reading = readings.get(row.id)
                if reading is None:
                    continue
                samples.append(to_sample(row, reading, self._last.get(row.id), now_ms))
                self._last[row.id] = reading
            await asyncio.to_thread(self._records.add_samples, samples)
        return len(samples)

    async def current(self, row: Sandbox) -> SandboxMetricSample | None:
        """A reading of one sandbox now, not stored (envd's ``GET /metrics``); its CPU share
        is over the time since the last stored sample. None if it does not run here."""
        if row.runtime != self._runtime.name:
            return None
        readings = await self._runtime.stats([row.id])
        reading = readings.get(row.id)
        if reading is None:
            return None
        return to_sample(row, reading, self._last.get(row.id), int(time.time() * 1000))

    def forget(self, sandbox_id: str) -> None:
        """Drops the sandbox's last reading (it ended)."""
        self._last.pop(sandbox_id, None)

    async def _tick(self) -> None:
        began = asyncio.get_running_loop().time()
        await self.sample(await asyncio.to_thread(self._running))
        if began - self._pruned >= _PRUNE_INTERVAL_S:
            self._pruned = began
            cutoff = int((time.time() - self._config.retention_hours * 3600) * 1000)
            await asyncio.to_thread(self._records.prune_samples, cutoff)

    def _running(self) -> list[Sandbox]:
        live = self._store.live_sandboxes()
        running = {row.id for row in live if row.state == "running"}
        for gone in self._last.keys() - running:
            self._last.pop(gone, None)
        return [row for row in live if row.id in running]


def to_sample(
    row: Sandbox, reading: SandboxStats, previous: SandboxStats | None, now_ms: int
) -> SandboxMetricSample:
    """One stored sample from a reading (and the previous one, for the CPU share)."""
    cpus = max(row.cpu_count, 1)
    pct = 0.0
    if reading.cpu_ns is not None:
        if previous is not None and previous.cpu_ns is not None and reading.taken > previous.taken:
            used = reading.cpu_ns - previous.cpu_ns
            wall = reading.taken - previous.taken
        else:
            used = reading.cpu_ns
            wall = max(now_ms / 1000 - row.started_at.timestamp(), 0.001)
        pct = min(max(used / (wall * 1e9 * cpus) * 100, 0.0), 100.0)
    return SandboxMetricSample(
        sandbox_id=row.id,
        time_ms=now_ms,
        cpu_count=cpus,
        cpu_used_pct=round(pct, 2),
        mem_used=max(reading.mem_usage - reading.mem_cache, 0),
        mem_total=row.memory_mb * _MIB,
        mem_cache=max(reading.mem_cache - reading.disk_used, 0),
        disk_used=reading.disk_used,
        disk_total=reading.disk_total,
    )
