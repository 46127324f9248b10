"""``/v1`` routes of the agent runner: agents, runs, and a run's events as Server-Sent Events.

Authenticated with the same API keys as the E2B control plane (``X-API-Key``); a team sees
only its own sessions and runs. The SSE stream replays a run's stored events first, so a
client that connects late (or reconnects with ``Last-Event-ID``) misses nothing.
"""

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator
from typing import Annotated, Any

from fastapi import APIRouter, Header
from fastapi.responses import StreamingResponse
from pydantic import BaseModel, ConfigDict, Field

from sandgate.agents import PUBLIC_EVENTS, AgentRunner, RunEvent
from sandgate.api.auth import Caller
from sandgate.api.strict import QueryBool, decimal
from sandgate.store import AgentRun, Store

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
        session = runner.session(caller, session_id)
        return {
            "id": session.id,
            "agent": session.agent_id,
            "sandbox": session.sandbox_id,
            "messages": len(session.messages),
            "created_at": session.created_at.isoformat(),
            "updated_at": session.updated_at.isoformat(),
        }

    return router


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
        "created_at": run.created_at.isoformat(),
        "ended_at": run.ended_at.isoformat() if run.ended_at else None,
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
                event = await asyncio.wait_for(queue.get(), _KEEPALIVE_S)
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
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
