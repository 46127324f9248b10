"""``/v1`` routes of the agent runner: agents, sessions, runs (list, start, cancel) and a run's
events as Server-Sent Events.

Authenticated with the same API keys as the E2B control plane (``X-API-Key``); a team sees
only its own sessions and runs. The SSE stream replays a run's stored events first, so a
client that connects late (or reconnects with ``Last-Event-ID``) misses nothing.
"""

import asyncio
import json
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from typing import Annotated, Any

from fastapi import APIRouter, Header, Query
from fastapi.responses import StreamingResponse
from pydantic import BaseModel, ConfigDict, Field

from sandgate._tasks import cancel_and_wait
from sandgate.agents import PUBLIC_EVENTS, AgentRunner, RunEvent, RunState
from sandgate.api.auth import Caller
from sandgate.api.strict import QueryBool, QueryInt, decimal
from sandgate.errors import InvalidRequest
from sandgate.store import AgentRun, AgentSession, Store

__all__ = ["build_agents_router", "run_json"]

_KEEPALIVE_S = 15.0


class RunRequest(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)

    message: str = Field(min_length=1, max_length=200_000)
    session_id: str | None = None


def build_agents_router(runner: AgentRunner, store: Store) -> APIRouter:
    router = APIRouter(prefix="/v1")

    @router.get("/agents")
    def list_agents(caller: Caller) -> dict[str, Any]:
        return {
            "agents": [
                {
                    "id": a.id,
                    "name": a.name or a.id,
                    "mode": a.mode,
                    "models": [f"{m.provider}/{m.model}" for m in a.models],
                    "autonomy": a.autonomy,
                }
                for a in runner.agents()
                if not a.teams or caller.team_id in a.teams
            ]
        }

    @router.post("/agents/{agent_id}/runs", status_code=201)
    async def start_run(caller: Caller, agent_id: str, body: RunRequest) -> dict[str, Any]:
        run = await runner.submit(caller, agent_id, body.message, body.session_id)
        return run_json(run)

    @router.post("/agents/{agent_id}/sessions", status_code=201)
    def open_session(caller: Caller, agent_id: str) -> dict[str, Any]:
        return session_json(runner.open_session(caller, agent_id))

    @router.get("/runs")
    def list_runs(
        caller: Caller,
        agent: str | None = None,
        status: Annotated[list[str] | None, Query()] = None,
        since: str | None = None,
        until: str | None = None,
        limit: Annotated[QueryInt, Query(ge=1, le=1000)] = 50,
    ) -> dict[str, Any]:
        states = [parse_run_state(value) for item in status or [] for value in item.split(",")]
        runs = runner.list_runs(
            caller,
            agent_id=agent,
            states=states,
            since=parse_time("since", since),
            until=parse_time("until", until),
            limit=limit,
        )
        return {"runs": [run_json(run) for run in runs]}

    @router.post("/runs/{run_id}/cancel")
    async def cancel_run(caller: Caller, run_id: str) -> dict[str, Any]:
        return run_json(await runner.cancel(caller, run_id, by=f"api:{caller.api_key_id}"))

    @router.get("/runs/{run_id}")
    def get_run(caller: Caller, run_id: str, trace: QueryBool = False) -> dict[str, Any]:
        data = run_json(runner.run(caller, run_id))
        if trace:
            data["trace"] = [e.as_dict() for e in runner.trace(run_id)]
        return data

    @router.get("/runs/{run_id}/events")
    async def run_events(
        caller: Caller,
        run_id: str,
        last_event_id: Annotated[str | None, Header(alias="Last-Event-ID")] = None,
    ) -> StreamingResponse:
        runner.run(caller, run_id)
        after = _event_id(last_event_id)
        return StreamingResponse(
            _sse(runner.events(run_id, after)),
            media_type="text/event-stream",
            headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
        )

    @router.get("/sessions/{session_id}")
    def get_session(caller: Caller, session_id: str) -> dict[str, Any]:
        return session_json(runner.session(caller, session_id))

    @router.delete("/sessions/{session_id}")
    async def end_session(caller: Caller, session_id: str) -> dict[str, Any]:
        return session_json(await runner.end_session(caller, session_id))

    return router


def parse_run_state(value: str) -> str:
    try:
        return RunState(value.strip()).value
    except ValueError:
        names = ", ".join(state.value for state in RunState)
        raise InvalidRequest(f"status '{value[:40]}' is not a run state ({names})") from None


def parse_time(name: str, value: str | None) -> datetime | None:
    """An ISO 8601 time (``2026-12-01T10:00:00Z``; without a zone, UTC)."""
    if value is None:
        return None
    try:
        parsed = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        raise InvalidRequest(
            f"{name} must be an ISO 8601 time such as 2026-12-01T10:00:00Z"
        ) from None
    return (parsed if parsed.tzinfo is not None else parsed.replace(tzinfo=UTC)).astimezone(UTC)


def session_json(session: AgentSession) -> dict[str, Any]:
    return {
        "id": session.id,
        "agent": session.agent_id,
        "sandbox": session.sandbox_id,
        "ephemeral": session.ephemeral,
        "messages": len(session.messages),
        "created_at": session.created_at.isoformat(),
        "updated_at": session.updated_at.isoformat(),
    }


def _event_id(header: str | None) -> int:
    """``Last-Event-ID`` as a sequence number; absent or not a canonical non-negative decimal
    means "from the start" (SSE clients echo back only ids we sent)."""
    try:
        return max(0, decimal(header)) if header else 0
    except ValueError:
        return 0


def run_json(run: AgentRun) -> dict[str, Any]:
    return {
        "id": run.id,
        "session_id": run.session_id,
        "agent": run.agent_id,
        "state": run.state,
        "message": run.message,
        "answer": run.answer,
        "stop_reason": run.stop_reason,
        "error": run.error,
        "usage": {
            "steps": run.steps,
            "model_calls": run.model_calls,
            "prompt_tokens": run.prompt_tokens,
            "completion_tokens": run.completion_tokens,
            "tool_calls": run.tool_calls,
        },
        "sandbox_id": run.sandbox_id,
        "created_at": run.created_at.isoformat(),
        "ended_at": run.ended_at.isoformat() if run.ended_at else None,
        "cancel_requested_at": (
            run.cancel_requested_at.isoformat() if run.cancel_requested_at else None
        ),
        "cancelled_by": run.cancelled_by,
    }


async def _sse(events: AsyncIterator[RunEvent]) -> AsyncIterator[bytes]:
    """Formats events as SSE, with a comment line every ``_KEEPALIVE_S`` of silence."""
    queue: asyncio.Queue[RunEvent | None] = asyncio.Queue()

    async def pump() -> None:
        try:
            async for event in events:
                await queue.put(event)
        finally:
            await queue.put(None)

    task = asyncio.create_task(pump())
    try:
        while True:
            try:
                async with asyncio.timeout(_KEEPALIVE_S):
                    event = await queue.get()
            except TimeoutError:
                yield b": keepalive\n\n"
                continue
            if event is None:
                return
            if event.type not in PUBLIC_EVENTS:
                continue
            payload = json.dumps(event.data, default=str)
            yield f"id: {event.seq}\nevent: {event.type}\ndata: {payload}\n\n".encode()
    finally:
        await cancel_and_wait(task)
