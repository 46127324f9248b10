"""E2B sandbox metrics: ``GET /sandboxes/{id}/metrics`` and ``GET /sandboxes/metrics``.

Contract (the SDKs' generated clients, ``SandboxMetric`` and ``SandboxesWithMetrics``):

* ``GET /sandboxes/{id}/metrics?start=<unix s>&end=<unix s>`` → 200, the sandbox's samples
  with ``start <= timestampUnix <= end``, oldest first; ``start`` defaults to the sandbox's
  start, ``end`` to now. A sandbox that ended keeps its samples for
  ``metrics.retention_hours``. A running sandbox with no sample yet is sampled on the spot, so
  the answer is never empty while it runs. More than :data:`MAX_POINTS` samples are averaged
  in consecutive groups down to at most that many.
* ``GET /sandboxes/metrics?sandbox_ids=a,b`` (comma-separated, or the key repeated) → 200
  ``{"sandboxes": {id: newest sample}}`` for those of the caller's sandboxes that run; at most
  :data:`MAX_IDS` ids (400 beyond, as E2B).

A sandbox of another team is reported exactly like one that does not exist (404).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Annotated, Any, Final

from fastapi import APIRouter, Query, Response
from fastapi.responses import JSONResponse

from sandgate.access import Principal
from sandgate.api.auth import Caller
from sandgate.api.strict import QueryInt
from sandgate.errors import InvalidRequest, SandboxNotFound
from sandgate.store import Sandbox, SandboxMetricSample, Store, TelemetryRecords
from sandgate.telemetry import Telemetry

__all__ = ["MAX_IDS", "MAX_POINTS", "build_metrics_router", "iso_ms", "owned_sandbox"]

#: Most samples one answer holds (E2B's SDKs plot them; a day at 5 s is 17 280).
MAX_POINTS: Final = 1000
#: Most ids ``GET /sandboxes/metrics`` takes (E2B's limit).
MAX_IDS: Final = 100


def iso_ms(time_ms: int) -> str:
    """RFC 3339 UTC with milliseconds, as E2B writes timestamps."""
    moment = datetime.fromtimestamp(time_ms / 1000, UTC)
    return moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def owned_sandbox(store: Store, caller: Principal, sandbox_id: str) -> Sandbox:
    """The caller's sandbox in any state (its telemetry outlives it); 404 otherwise."""
    row = store.sandbox(sandbox_id)
    if row is None or row.team_id != caller.team_id:
        raise SandboxNotFound(f"sandbox '{sandbox_id}' not found")
    return row


def build_metrics_router(store: Store, telemetry: Telemetry) -> APIRouter:
    router = APIRouter()
    records = TelemetryRecords(store)

    @router.get("/sandboxes/metrics")
    async def many(
        caller: Caller,
        sandbox_ids: Annotated[list[str] | None, Query()] = None,
    ) -> Response:
        ids = _ids(sandbox_ids)
        rows = [row for row in (store.sandbox(i) for i in ids) if row is not None]
        running = [r for r in rows if r.team_id == caller.team_id and r.state == "running"]
        wanted = [row.id for row in running]
        latest = await asyncio.to_thread(records.latest_samples, wanted)
        unsampled = [row for row in running if row.id not in latest]
        if unsampled:
            await telemetry.sampler.sample(unsampled)
            latest = await asyncio.to_thread(records.latest_samples, wanted)
        body = {sandbox_id: metric_body(latest[sandbox_id]) for sandbox_id in latest}
        return JSONResponse({"sandboxes": body})

    @router.get("/sandboxes/{sandbox_id}/metrics")
    async def one(
        sandbox_id: str,
        caller: Caller,
        start: QueryInt | None = None,
        end: QueryInt | None = None,
    ) -> Response:
        row = owned_sandbox(store, caller, sandbox_id)
        now = int(time.time())
        first = int(row.started_at.timestamp()) if start is None else start
        last = now if end is None else end
        if first < 0 or last < 0:
            raise InvalidRequest("start and end are unix times in seconds (0 or more)")
        if first > last:
            raise InvalidRequest(f"start ({first}) must not be after end ({last})")
        start_ms, end_ms = first * 1000, last * 1000 + 999
        samples = await _samples(records, row.id, start_ms, end_ms)
        if not samples and row.state == "running" and end_ms >= now * 1000:
            await telemetry.sampler.sample([row])
            samples = await _samples(records, row.id, start_ms, end_ms)
        return JSONResponse([metric_body(sample) for sample in _thin(samples)])

    return router


def metric_body(sample: SandboxMetricSample) -> dict[str, Any]:
    return {
        "timestamp": iso_ms(sample.time_ms),
        "timestampUnix": sample.time_ms // 1000,
        "cpuCount": sample.cpu_count,
        "cpuUsedPct": sample.cpu_used_pct,
        "memUsed": sample.mem_used,
        "memTotal": sample.mem_total,
        "memCache": sample.mem_cache,
        "diskUsed": sample.disk_used,
        "diskTotal": sample.disk_total,
    }


async def _samples(
    records: TelemetryRecords, sandbox_id: str, start_ms: int, end_ms: int
) -> Sequence[SandboxMetricSample]:
    # The retention bounds a range: at most retention / interval samples (17 280 a day at 5 s).
    return await asyncio.to_thread(records.samples, sandbox_id, start_ms, end_ms, 10**6)


def _thin(samples: Sequence[SandboxMetricSample]) -> list[SandboxMetricSample]:
    """At most ``MAX_POINTS`` samples: consecutive groups averaged (the group's last time)."""
    if len(samples) <= MAX_POINTS:
        return list(samples)
    size = -(-len(samples) // MAX_POINTS)
    thinned = []
    for at in range(0, len(samples), size):
        group = samples[at : at + size]
        last = group[-1]

        def mean(name: str, group: Sequence[SandboxMetricSample] = group) -> float:
            return sum(float(getattr(s, name)) for s in group) / len(group)

        thinned.append(
            SandboxMetricSample(
                sandbox_id=last.sandbox_id,
                time_ms=last.time_ms,
                cpu_count=last.cpu_count,
                cpu_used_pct=round(mean("cpu_used_pct"), 2),
                mem_used=int(mean("mem_used")),
                mem_total=last.mem_total,
                mem_cache=int(mean("mem_cache")),
                disk_used=int(mean("disk_used")),
                disk_total=last.disk_total,
            )
        )
    return thinned


def _ids(raw: list[str] | None) -> list[str]:
    ids: list[str] = []
    for value in raw or []:
        for part in value.split(","):
            part = part.strip()
            if part and part not in ids:
                ids.append(part)
    if not ids:
        raise InvalidRequest("sandbox_ids is required: one or more sandbox ids, comma-separated")
    if len(ids) > MAX_IDS:
        raise InvalidRequest(f"too many sandboxes requested ({len(ids)}); the maximum is {MAX_IDS}")
    return ids
