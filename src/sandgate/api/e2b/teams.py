"""E2B teams: ``GET /teams`` and the team metrics, ``GET /teams/{teamID}/metrics`` and
``GET /teams/{teamID}/metrics/max``.

A Sandgate team is the team of an API key (``sandgate keys``); a key sees its own team only,
so ``/teams`` lists exactly one ``Team``, the default one. Its ``apiKey`` is the key the
request presented (the CLI stores it as the project's key): keys are kept only as hashes, and
echoing the caller's own key tells it nothing it lacks. No other team, key or secret is named.

Team metrics are computed from the sandboxes table, which keeps every sandbox's create and end
time (``TelemetryRecords.lifetimes``); a sandbox counts from create to kill, paused or not.

* ``/metrics?start=&end=`` (unix seconds; ``end`` defaults to now, ``start`` to an hour before
  ``end``; at most :data:`MAX_RANGE_S` apart) → ``[TeamMetric]``, oldest first: the range cut
  into equal steps (:data:`MIN_STEP_S` or longer, at most :data:`MAX_POINTS` of them), each
  with the most sandboxes that existed at once during the step (``concurrentSandboxes``) and
  the sandboxes created in it per second (``sandboxStartRate``), stamped with its start.
* ``/metrics/max?metric=concurrent_sandboxes|sandbox_start_rate`` (same range) →
  ``MaxTeamMetric``: the largest value of that series and the start of its (first) step.

Another team's id answers 403 whether or not it exists; bad parameters 400.
"""

from __future__ import annotations

import asyncio
import time
from bisect import bisect_left
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Final

from fastapi import APIRouter, Request, Response
from fastapi.responses import JSONResponse

from sandgate.access import Principal
from sandgate.api.auth import Caller, request_key
from sandgate.api.e2b.metrics import iso_ms
from sandgate.api.strict import QueryInt
from sandgate.errors import Forbidden, InvalidRequest
from sandgate.store import Store, TelemetryRecords

__all__ = ["MAX_POINTS", "MAX_RANGE_S", "MIN_STEP_S", "TeamSeries", "build_teams_router"]

#: Most points one answer holds.
MAX_POINTS: Final = 1000
#: Shortest step (E2B samples team metrics every 5 s).
MIN_STEP_S: Final = 5
#: Longest range one request may ask for.
MAX_RANGE_S: Final = 31 * 24 * 3600
_DEFAULT_RANGE_S: Final = 3600
_METRICS: Final = ("concurrent_sandboxes", "sandbox_start_rate")


@dataclass(frozen=True)
class TeamSeries:
    """The team's series over ``[start, end]`` in steps of ``step`` seconds."""

    start: int
    step: int
    concurrent: list[int]
    starts: list[int]

    def rate(self, index: int) -> float:
        return round(self.starts[index] / self.step, 4)

    def at(self, index: int) -> int:
        return self.start + index * self.step


def team_series(
    lifetimes: list[tuple[datetime, datetime | None]], start: int, end: int, now: float
) -> TeamSeries:
    """Sweeps the sandboxes' create (+1) and end (-1) events across the steps of the range."""
    span = end - start + 1
    step = max(MIN_STEP_S, -(-span // MAX_POINTS))
    count = -(-span // step)
    concurrent = [0] * count
    starts = [0] * count
    events: list[tuple[float, int]] = []
    alive = 0
    for started, ended in lifetimes:
        born = started.timestamp()
        died = ended.timestamp() if ended is not None else max(now, end + 1.0)
        if born >= end + 1:
            continue
        if born < start:
            alive += 1
        else:
            events.append((born, 1))
            starts[int(born - start) // step] += 1
        if died < end + 1:
            events.append((died, -1))
    # Ends before starts at one instant: a sandbox replaced at once is not two at once.
    events.sort()
    edges = [start + (i + 1) * step for i in range(count)]
    index = 0
    for i, edge in enumerate(edges):
        most = alive
        stop = bisect_left(events, (edge, -2), lo=index)
        for _, change in events[index:stop]:
            alive += change
            most = max(most, alive)
        index = stop
        concurrent[i] = most
    return TeamSeries(start, step, concurrent, starts)


def build_teams_router(store: Store) -> APIRouter:
    router = APIRouter()
    records = TelemetryRecords(store)

    @router.get("/teams")
    async def teams(caller: Caller, request: Request) -> Response:
        # The E2B CLI logs in with an access token and keeps the key this answers.
        key = request_key(request) or ""
        team = store.team(caller.team_id)
        name = team.name if team is not None else caller.team_id
        return JSONResponse(
            [{"teamID": caller.team_id, "name": name, "apiKey": key, "isDefault": True}]
        )

    async def series(
        caller: Principal, team_id: str, start: int | None, end: int | None
    ) -> TeamSeries:
        if team_id != caller.team_id:
            raise Forbidden(
                f"team '{team_id[:64]}' is not your API key's team: GET /teams names yours"
            )
        now = time.time()
        last = int(now) if end is None else end
        first = last - _DEFAULT_RANGE_S if start is None else start
        if first < 0 or last < 0:
            raise InvalidRequest("start and end are unix times in seconds (0 or more)")
        if first > last:
            raise InvalidRequest(f"start ({first}) must not be after end ({last})")
        if last - first > MAX_RANGE_S:
            raise InvalidRequest(
                f"the range from start to end is longer than {MAX_RANGE_S // 86400} days: "
                "ask for a shorter one"
            )
        lifetimes = await asyncio.to_thread(
            records.lifetimes,
            caller.team_id,
            datetime.fromtimestamp(first, UTC),
            datetime.fromtimestamp(last + 1, UTC),
        )
        return team_series(lifetimes, first, last, now)

    @router.get("/teams/{team_id}/metrics")
    async def metrics(
        team_id: str, caller: Caller, start: QueryInt | None = None, end: QueryInt | None = None
    ) -> Response:
        found = await series(caller, team_id, start, end)
        return JSONResponse(
            [
                {
                    "concurrentSandboxes": found.concurrent[i],
                    "sandboxStartRate": found.rate(i),
                    "timestamp": iso_ms(found.at(i) * 1000),
                    "timestampUnix": found.at(i),
                }
                for i in range(len(found.concurrent))
            ]
        )

    @router.get("/teams/{team_id}/metrics/max")
    async def maximum(
        team_id: str,
        caller: Caller,
        metric: str | None = None,
        start: QueryInt | None = None,
        end: QueryInt | None = None,
    ) -> Response:
        if metric not in _METRICS:
            raise InvalidRequest(
                f"metric must be one of {', '.join(_METRICS)}; got {str(metric)[:64]!r}"
            )
        found = await series(caller, team_id, start, end)
        values: list[float] = (
            [float(v) for v in found.concurrent]
            if metric == "concurrent_sandboxes"
            else [found.rate(i) for i in range(len(found.starts))]
        )
        best = max(range(len(values)), key=lambda i: (values[i], -i))
        body: dict[str, Any] = {
            "timestamp": iso_ms(found.at(best) * 1000),
            "timestampUnix": found.at(best),
            "value": values[best] if metric == "sandbox_start_rate" else int(values[best]),
        }
        return JSONResponse(body)

    return router
