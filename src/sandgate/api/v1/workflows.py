"""``/v1`` routes of workflows: definitions, runs, cancel/retry, and a run's events as SSE.

Authenticated with the same API keys as everything else (``X-API-Key``). A team sees the
config's workflows and its own API-defined ones, and only its own runs. The SSE stream
replays a run's stored events first (``Last-Event-ID`` resumes), then follows it live until
it ends.
"""

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Annotated, Any

from fastapi import APIRouter, Body, Header, Query
from fastapi.responses import StreamingResponse
from pydantic import BaseModel, ConfigDict, Field

from sandgate._tasks import cancel_and_wait
from sandgate.api.auth import Caller
from sandgate.api.strict import QueryInt, decimal
from sandgate.store import WorkflowEvent, WorkflowRun, WorkflowStepRecord
from sandgate.workflows.service import Definition, WorkflowService

__all__ = ["build_workflows_router", "run_json"]

_KEEPALIVE_S = 15.0


class RunRequest(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)

    inputs: dict[str, Any] = Field(default_factory=dict)


def build_workflows_router(service: WorkflowService) -> APIRouter:
    router = APIRouter(prefix="/v1")

    @router.get("/workflows")
    def list_workflows(caller: Caller) -> dict[str, Any]:
        return {"workflows": [definition_json(d) for d in service.definitions(caller)]}

    @router.get("/workflows/{name}")
    def get_workflow(caller: Caller, name: str) -> dict[str, Any]:
        return definition_json(service.definition(caller, name), full=True)

    @router.put("/workflows/{name}")
    def put_workflow(
        caller: Caller, name: str, body: Annotated[Any, Body()] = None
    ) -> dict[str, Any]:
        return definition_json(service.put_definition(caller, name, body), full=True)

    @router.delete("/workflows/{name}", status_code=204)
    def delete_workflow(caller: Caller, name: str) -> None:
        service.delete_definition(caller, name)

    @router.post("/workflows/{name}/runs", status_code=201)
    async def start_run(caller: Caller, name: str, body: RunRequest) -> dict[str, Any]:
        run = await service.start(caller, name, body.inputs)
        return run_json(run, service.steps(run.id))

    @router.get("/workflow-runs")
    def list_runs(
        caller: Caller,
        workflow: str | None = None,
        limit: Annotated[QueryInt, Query(ge=1, le=1000)] = 50,
    ) -> dict[str, Any]:
        return {"runs": [run_json(r) for r in service.runs(caller, workflow=workflow, limit=limit)]}

    @router.get("/workflow-runs/{run_id}")
    def get_run(caller: Caller, run_id: str) -> dict[str, Any]:
        run = service.run(caller, run_id)
        return run_json(run, service.steps(run.id))

    @router.post("/workflow-runs/{run_id}/cancel")
    async def cancel_run(caller: Caller, run_id: str) -> dict[str, Any]:
        run = await service.cancel(caller, run_id)
        return run_json(run, service.steps(run.id))

    @router.post("/workflow-runs/{run_id}/retry")
    async def retry_run(caller: Caller, run_id: str) -> dict[str, Any]:
        run = await service.retry(caller, run_id)
        return run_json(run, service.steps(run.id))

    @router.get("/workflow-runs/{run_id}/events")
    async def run_events(
        caller: Caller,
        run_id: str,
        last_event_id: Annotated[str | None, Header(alias="Last-Event-ID")] = None,
    ) -> StreamingResponse:
        service.run(caller, run_id)
        return StreamingResponse(
            _sse(service.events(run_id, _event_id(last_event_id))),
            media_type="text/event-stream",
            headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
        )

    return router


def definition_json(definition: Definition, *, full: bool = False) -> dict[str, Any]:
    workflow = definition.workflow
    data: dict[str, Any] = {
        "name": workflow.name,
        "description": workflow.description,
        "source": definition.source,
        "inputs": workflow.inputs,
        "steps": [{"id": s.id, "kind": s.kind} for s in workflow.steps],
        "schedule": workflow.schedule,
    }
    if full:
        data["definition"] = workflow.model_dump(mode="json", by_alias=True)
    return data


def run_json(run: WorkflowRun, steps: "list[WorkflowStepRecord] | Any" = None) -> dict[str, Any]:
    data: dict[str, Any] = {
        "id": run.id,
        "workflow": run.workflow,
        "state": run.state,
        "trigger": run.trigger,
        "attempt": run.attempt,
        "inputs": run.inputs,
        "output": run.output,
        "error": run.error,
        "error_code": run.error_code,
        "failed_step": run.failed_step,
        "parent_run": run.parent_run_id,
        "usage": {"tool_calls": run.tool_calls, "tokens": run.tokens},
        "created_at": run.created_at.isoformat(),
        "started_at": run.started_at.isoformat() if run.started_at else None,
        "ended_at": run.ended_at.isoformat() if run.ended_at else None,
    }
    if steps is not None:
        data["steps"] = [step_json(s) for s in steps]
    return data


def step_json(step: WorkflowStepRecord) -> dict[str, Any]:
    duration = None
    if step.started_at is not None and step.ended_at is not None:
        duration = round((step.ended_at - step.started_at).total_seconds() * 1000, 3)
    return {
        "id": step.step_id,
        "kind": step.kind,
        "state": step.state,
        "attempt": step.attempt,
        "depends_on": step.depends_on,
        "started_at": step.started_at.isoformat() if step.started_at else None,
        "ended_at": step.ended_at.isoformat() if step.ended_at else None,
        "duration_ms": duration,
        "output": step.output,
        "summary": step.summary,
        "error": step.error,
        "error_code": step.error_code,
        "items": None
        if step.items_total is None
        else {"total": step.items_total, "done": step.items_done},
        "detail": step.detail,
    }


def _event_id(header: str | None) -> int:
    try:
        return max(0, decimal(header)) if header else 0
    except ValueError:
        return 0


async def _sse(events: AsyncIterator[WorkflowEvent]) -> AsyncIterator[bytes]:
    """Formats events as SSE, with a comment line every ``_KEEPALIVE_S`` of silence."""
    queue: asyncio.Queue[WorkflowEvent | None] = asyncio.Queue()

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
            payload = json.dumps(event.data, default=str)
            yield f"id: {event.id}\nevent: {event.type}\ndata: {payload}\n\n".encode()
    finally:
        await cancel_and_wait(task)
