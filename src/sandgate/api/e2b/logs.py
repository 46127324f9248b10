"""E2B sandbox logs: ``GET /sandboxes/{id}/logs`` (v1, what ``e2b sandbox logs`` reads) and
``GET /v2/sandboxes/{id}/logs``.

What a sandbox's log holds (``telemetry.logs``): its lifecycle (created, paused, resumed,
killed and why; logger ``sandboxSvc``) and its processes as envd logs them (each start with its
command, each line of stdout/stderr, each end with its exit status; logger ``processSvc``).
A running sandbox's guest is asked for its newest entries before every answer; an ended
sandbox's log stays readable for ``sandbox_logs.retention_hours``.

* v1: ``?start=<unix ms>&limit=<n>`` (default 1000, at most 1000) → ``{"logs": [{timestamp,
  line}], "logEntries": [{timestamp, level, message, fields}]}``, oldest first from ``start``.
  ``line`` is the entry as one JSON object (``level``, ``message``, the fields), which the CLI
  parses and prints.
* v2: ``?cursor=<unix ms>&direction=forward|backward&limit=&level=&search=`` → ``{"logs":
  [SandboxLogEntry]}``: forward from ``cursor`` (default: the oldest kept), or backward from it
  (default: now), newest first; ``level`` is a minimum, ``search`` a case-sensitive substring
  of the message.

Bad parameters are 400 with the accepted values named; another team's sandbox is 404, like an
unknown one.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Annotated, Any, Final

from fastapi import APIRouter, Query, Response
from fastapi.responses import JSONResponse

from sandgate.access import Principal
from sandgate.api.auth import Caller
from sandgate.api.e2b.metrics import iso_ms, owned_sandbox
from sandgate.api.strict import QueryInt
from sandgate.config import SandboxLogsConfig
from sandgate.errors import InvalidRequest
from sandgate.store import SandboxLogEntry, Store
from sandgate.telemetry import LEVELS, Telemetry, level_at_least

__all__ = ["MAX_LIMIT", "build_logs_router"]

#: Default and largest ``limit`` (E2B's).
MAX_LIMIT: Final = 1000
_MAX_SEARCH = 256


def build_logs_router(store: Store, telemetry: Telemetry, config: SandboxLogsConfig) -> APIRouter:
    router = APIRouter()
    #: Every entry a sandbox can hold: filters run over the whole ring.
    ring = config.max_entries_per_sandbox

    async def fresh(sandbox_id: str, caller: Principal) -> None:
        row = owned_sandbox(store, caller, sandbox_id)
        if row.state == "running":
            await telemetry.logs.collect(row.id)

    @router.get("/sandboxes/{sandbox_id}/logs")
    async def logs_v1(
        sandbox_id: str,
        caller: Caller,
        start: QueryInt | None = None,
        limit: QueryInt | None = None,
    ) -> Response:
        count = _limit(limit)
        if start is not None and start < 0:
            raise InvalidRequest("start is a unix time in milliseconds (0 or more)")
        await fresh(sandbox_id, caller)
        entries = await telemetry.logs.entries(sandbox_id, start_ms=start, limit=count)
        return JSONResponse(
            {
                "logs": [
                    {"timestamp": iso_ms(e.time_ms), "line": _line(sandbox_id, e)} for e in entries
                ],
                "logEntries": [_entry_body(e) for e in entries],
            }
        )

    @router.get("/v2/sandboxes/{sandbox_id}/logs")
    async def logs_v2(
        sandbox_id: str,
        caller: Caller,
        cursor: QueryInt | None = None,
        limit: QueryInt | None = None,
        direction: str | None = None,
        level: str | None = None,
        search: Annotated[str | None, Query(max_length=_MAX_SEARCH)] = None,
    ) -> Response:
        count = _limit(limit)
        if cursor is not None and cursor < 0:
            raise InvalidRequest("cursor is a unix time in milliseconds (0 or more)")
        if direction not in (None, "forward", "backward"):
            raise InvalidRequest(f"unknown direction {direction!r}: use forward or backward")
        if level is not None and level not in LEVELS:
            raise InvalidRequest(f"unknown level {level!r}: use one of {', '.join(LEVELS)}")
        await fresh(sandbox_id, caller)
        backward = direction == "backward"
        entries = await telemetry.logs.entries(
            sandbox_id,
            start_ms=None if backward else cursor,
            end_ms=cursor if backward else None,
            newest_first=backward,
            limit=ring + MAX_LIMIT,
        )
        chosen = _filter(entries, level, search)[:count]
        return JSONResponse({"logs": [_entry_body(e) for e in chosen]})

    return router


def _limit(limit: int | None) -> int:
    if limit is None:
        return MAX_LIMIT
    if not 0 <= limit <= MAX_LIMIT:
        raise InvalidRequest(f"limit must be between 0 and {MAX_LIMIT}")
    return limit


def _filter(
    entries: Sequence[SandboxLogEntry], level: str | None, search: str | None
) -> list[SandboxLogEntry]:
    return [
        e
        for e in entries
        if (level is None or level_at_least(e.level, level))
        and (search is None or search in e.message)
    ]


def _entry_body(entry: SandboxLogEntry) -> dict[str, Any]:
    return {
        "timestamp": iso_ms(entry.time_ms),
        "level": entry.level,
        "message": entry.message,
        "fields": {str(k): str(v) for k, v in entry.fields.items()},
    }


def _line(sandbox_id: str, entry: SandboxLogEntry) -> str:
    """The raw line of a v1 entry: one JSON object, as envd's log records are."""
    record: dict[str, Any] = {str(k): str(v) for k, v in entry.fields.items()}
    record.update(level=entry.level, message=entry.message, sandboxID=sandbox_id)
    return json.dumps(record, ensure_ascii=False)
