"""Runs workflows on DBOS Transact: a run is a DBOS workflow that schedules its steps, and
every step (each ``for_each`` element) is a child DBOS workflow.

What DBOS gives us, and how it is used:

* **Checkpoints.** Every DBOS step's result is written to DBOS's system database before the
  workflow goes on; after a crash, ``DBOS.launch`` recovers the workflows that were running
  and replays them: recorded steps return their recorded results instead of running again.
* **A deterministic scheduler.** The run's workflow starts every step whose dependencies are
  done, then waits with ``DBOS.asyncio_wait(..., FIRST_COMPLETED)``, which records *which*
  steps finished first; on replay the same steps finish first, so the same next steps start
  with the same step ids. All of a step's own checkpoints live in its child workflow, whose
  code is sequential, so steps running side by side never race for ids.
* **Durable waits.** ``DBOS.sleep_async`` between retries; the approval wait runs as a step
  whose deadline is the approval's own (a restart does not restart the clock).

Exactly once, and where it stops (docs/workflows.md says the same to users): a step whose
result was checkpointed never runs again. A non-idempotent step first checkpoints a
"started" marker holding this process's nonce; if the process dies while the step runs, the
replay finds a marker from another process and no result, and the step is *interrupted*: the
run stops and names it, because the step may or may not have acted. ``sandgate workflows
retry`` runs it again after a person has checked. An idempotent step is simply run again.

The DBOS instance is process-wide (DBOS is a singleton): one ``Engine`` per server process.
"""

from __future__ import annotations

import asyncio
import hashlib
import secrets
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

import structlog
from dbos import DBOS, SetWorkflowID

from sandgate.config._workflows import WorkflowConfig
from sandgate.workflows.expressions import ExpressionError, Scope
from sandgate.workflows.graph import Graph, Node, compile_graph
from sandgate.workflows.state import RunState, StepState
from sandgate.workflows.steps import Outcome, StepContext, StepExecutors

if TYPE_CHECKING:
    from sandgate.store import WorkflowRecords, WorkflowRun

__all__ = ["PROCESS_NONCE", "Engine", "dbos_workflow_id", "summarize"]

log = structlog.get_logger("sandgate.workflows")

#: Identifies this server process in "started" markers (see the module docstring).
PROCESS_NONCE = secrets.token_hex(12)
#: Most elements one for_each step may fan out to.
MAX_ITEMS = 1000
_SUMMARY = 160


def dbos_workflow_id(run_id: str, attempt: int) -> str:
    """The DBOS workflow id of a run's attempt (each retry is a new DBOS workflow)."""
    return f"{run_id}-a{attempt}"


def child_run_id(run_id: str, attempt: int, label: str) -> str:
    """The id of the child run a ``workflow`` step starts: the same on every replay."""
    return "wfr_" + hashlib.sha256(f"{run_id}:{attempt}:{label}".encode()).hexdigest()[:16]


_ENGINE: Engine | None = None


def _engine() -> Engine:
    if _ENGINE is None:
        raise RuntimeError("the workflow engine is not running in this process")
    return _ENGINE


@DBOS.workflow(name="sandgate.run")
async def _run_workflow(run_id: str, attempt: int) -> dict[str, Any]:
    return await _engine().run(run_id, attempt)


@DBOS.workflow(name="sandgate.schedule")
async def _scheduled_workflow(at: datetime, context: Any) -> None:
    await _engine().scheduled(str(context), at)


@DBOS.workflow(name="sandgate.step")
async def _step_workflow(
    run_id: str, attempt: int, step_id: str, index: int | None, spec: dict[str, Any]
) -> dict[str, Any]:
    return await _engine().step(run_id, attempt, step_id, index, spec)


class Engine:
    """Starts runs on DBOS and executes them; ``records`` is the run/step bookkeeping."""

    def __init__(
        self,
        records: WorkflowRecords,
        executors: StepExecutors,
        *,
        create_child: Callable[[WorkflowRun, str, str, dict[str, Any]], WorkflowRun],
        create_scheduled: Callable[[str, str, datetime], Awaitable[WorkflowRun]],
    ) -> None:
        self.records = records
        self.executors = executors
        self._create_child = create_child
        self._create_scheduled = create_scheduled

    def install(self) -> None:
        global _ENGINE
        _ENGINE = self

    @staticmethod
    def uninstall() -> None:
        global _ENGINE
        _ENGINE = None

    async def start(self, run_id: str, attempt: int) -> None:
        """Starts (or, for an id DBOS knows, attaches to) the run's DBOS workflow."""
        with SetWorkflowID(dbos_workflow_id(run_id, attempt)):
            await DBOS.start_workflow_async(_run_workflow, run_id, attempt)

    async def scheduled(self, name: str, at: datetime) -> None:
        """A schedule fired: records the run (once per schedule and time) and runs it as a
        child of the schedule's DBOS workflow."""
        run_id = (
            "wfr_" + hashlib.sha256(f"schedule:{name}:{at.isoformat()}".encode()).hexdigest()[:16]
        )
        await DBOS.run_step_async({"name": "create"}, self._record_scheduled, name, run_id, at)
        with SetWorkflowID(dbos_workflow_id(run_id, 1)):
            handle = await DBOS.start_workflow_async(_run_workflow, run_id, 1)
        await handle.get_result()

    async def _record_scheduled(self, name: str, run_id: str, at: datetime) -> str:
        return (await self._create_scheduled(name, run_id, at)).id

    async def cancel(self, run_id: str, attempt: int) -> None:
        await DBOS.cancel_workflow_async(dbos_workflow_id(run_id, attempt), cancel_children=True)

    # -- a run ----------------------------------------------------------------------------

    async def run(self, run_id: str, attempt: int) -> dict[str, Any]:
        loaded = await DBOS.run_step_async({"name": "load"}, self._load, run_id, attempt)
        workflow = WorkflowConfig.model_validate(loaded["definition"])
        scheduler = _Scheduler(self, loaded, workflow, compile_graph(workflow), attempt)
        await self._records(
            self.records.move_run, run_id, RunState.RUNNING.value, started_at=_now()
        )
        return await scheduler.execute()

    def _load(self, run_id: str, attempt: int) -> dict[str, Any]:
        run = self.records.run(run_id)
        if run is None:
            raise RuntimeError(f"workflow run {run_id} has no record")
        carried: dict[str, Any] = {}
        carried_items: dict[str, dict[str, Any]] = {}
        for step in self.records.steps(run_id):
            if step.state in (StepState.COMPLETED.value, StepState.SKIPPED.value):
                carried[step.step_id] = step.output
            elif step.item_outputs:
                carried_items[step.step_id] = dict(step.item_outputs)
        return {
            "run": run_id,
            "workflow": run.workflow,
            "definition": run.definition,
            "inputs": run.inputs,
            "team": run.team_id,
            "api_key": run.api_key_id,
            "deadline": run.deadline_at.timestamp(),
            "carried": carried,
            "carried_items": carried_items,
            "tool_calls": run.tool_calls,
            "tokens": run.tokens,
        }

    # -- a step ---------------------------------------------------------------------------

    async def step(
        self, run_id: str, attempt: int, step_id: str, index: int | None, spec: dict[str, Any]
    ) -> dict[str, Any]:
        context = StepContext(
            run_id=run_id,
            attempt=attempt,
            workflow=spec["workflow"],
            step_id=step_id,
            index=index,
            team_id=spec["team"],
            api_key_id=spec["api_key"],
            agent=spec.get("agent"),
        )
        kind = spec["kind"]
        if kind == "approval":
            return await self._approval(context, spec)
        if kind == "workflow":
            return await self._child(context, spec)
        marker: str | None = None
        if not spec["idempotent"]:
            marker = await DBOS.run_step_async({"name": "started"}, _started)
        attempts = int(spec.get("retries", 0)) + 1
        result: dict[str, Any] = {}
        for number in range(1, attempts + 1):
            result = await DBOS.run_step_async(
                {"name": "execute"}, self._execute, context, spec, marker
            )
            if result["ok"] or result["code"] not in _retryable() or number == attempts:
                break
            await self._records(
                self.records.update_step,
                run_id,
                step_id,
                summary=f"attempt {number} failed: {result['code']}; retrying",
            )
            await DBOS.sleep_async(float(spec.get("backoff_s", 1.0)) * 2 ** (number - 1))
        return result

    async def _execute(
        self, context: StepContext, spec: dict[str, Any], marker: str | None
    ) -> dict[str, Any]:
        if marker is not None and marker != PROCESS_NONCE:
            # SECURITY: exactly-once rests here. The step started in a process that is gone
            # and left no result: it may have acted, so it must not act again unasked.
            return Outcome(
                False,
                code="step_interrupted",
                message=f"step {context.label} was running when the server stopped; it is "
                "not idempotent, so it was not run again. Check what it did, then "
                "`sandgate workflows retry` the run",
                state="interrupted",
            ).data()
        outcome = await self.executors.run(context, spec, spec.get("timeout_s"))
        return outcome.data()

    async def _approval(self, context: StepContext, spec: dict[str, Any]) -> dict[str, Any]:
        approval_id = await DBOS.run_step_async(
            {"name": "request"},
            self.executors.request_approval,
            context,
            spec,
            spec.get("timeout_s"),
        )
        await self._records(
            self.records.move_step,
            context.run_id,
            context.step_id,
            StepState.WAITING.value,
            attempt=context.attempt,
            detail={"approval": approval_id},
            event={"approval": approval_id, "message": spec["message"]},
        )
        decided = await DBOS.run_step_async(
            {"name": "decision"}, _decision, self.executors, context, approval_id
        )
        if not decided["ok"] and spec.get("on_deny") == "continue":
            decided = {**decided, "ok": True, "code": "", "message": "", "state": "completed"}
        return dict(decided)

    async def _child(self, context: StepContext, spec: dict[str, Any]) -> dict[str, Any]:
        child_id = await DBOS.run_step_async(
            {"name": "create"}, self._create_child_run, context, spec
        )
        with SetWorkflowID(dbos_workflow_id(child_id, 1)):
            handle = await DBOS.start_workflow_async(_run_workflow, child_id, 1)
        result: dict[str, Any] = await handle.get_result()
        return {**result, "detail": {"child_run": child_id}}

    def _create_child_run(self, context: StepContext, spec: dict[str, Any]) -> str:
        parent = self.records.run(context.run_id)
        if parent is None:
            raise RuntimeError(f"workflow run {context.run_id} has no record")
        child = self._create_child(
            parent,
            child_run_id(context.run_id, context.attempt, context.label),
            spec["child"],
            spec.get("inputs", {}),
        )
        self.records.update_step(context.run_id, context.step_id, detail={"child_run": child.id})
        return child.id

    @staticmethod
    async def _records(method: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        return await asyncio.to_thread(method, *args, **kwargs)


def _started() -> str:
    return PROCESS_NONCE


async def _decision(
    executors: StepExecutors, context: StepContext, approval_id: str
) -> dict[str, Any]:
    return (await executors.await_decision(context, approval_id)).data()


def _retryable() -> frozenset[str]:
    from sandgate.workflows.steps import RETRYABLE

    return RETRYABLE


def _now() -> datetime:
    return datetime.now(UTC)


def summarize(value: Any) -> str:
    """A one-line summary of an output for ``show`` and events."""
    if value is None:
        return "null"
    import json

    text = json.dumps(value, separators=(",", ":"), default=str)
    return text if len(text) <= _SUMMARY else text[: _SUMMARY - 1] + "…"


@dataclass(frozen=True)
class _Unit:
    """One child workflow: a step, or one element of a for_each step."""

    step: str
    index: int | None

    @property
    def label(self) -> str:
        return self.step if self.index is None else f"{self.step}[{self.index}]"


@dataclass
class _Failure:
    step: str | None
    code: str
    message: str
    state: str = "failed"


@dataclass
class _Scheduler:
    """The workflow code of one run attempt. Everything it decides depends only on recorded
    results, so a replay decides the same; its writes to the records are idempotent moves."""

    engine: Engine
    loaded: dict[str, Any]
    workflow: WorkflowConfig
    graph: Graph
    attempt: int
    outputs: dict[str, Any] = field(default_factory=dict)
    done: set[str] = field(default_factory=set)
    started: set[str] = field(default_factory=set)
    items: dict[str, list[Any]] = field(default_factory=dict)
    item_outputs: dict[str, dict[int, Any]] = field(default_factory=dict)
    queue: list[_Unit] = field(default_factory=list)
    running: list[tuple[_Unit, asyncio.Future[Any]]] = field(default_factory=list)
    failure: _Failure | None = None
    tool_calls: int = 0
    tokens: int = 0
    #: Usage not yet written to the run record (written with the next step move).
    usage: dict[str, Any] | None = None

    def __post_init__(self) -> None:
        for step, output in self.loaded["carried"].items():
            if step in self.graph.nodes:
                self.outputs[step] = output
                self.done.add(step)
                self.started.add(step)
        for step, outputs in self.loaded["carried_items"].items():
            self.item_outputs[step] = {int(k): v for k, v in outputs.items()}
        self.tool_calls = int(self.loaded["tool_calls"])
        self.tokens = int(self.loaded["tokens"])

    @property
    def run_id(self) -> str:
        return str(self.loaded["run"])

    async def execute(self) -> dict[str, Any]:
        deadline = float(self.loaded["deadline"])
        timed_out = False
        while True:
            if self.failure is None:
                await self._start_ready()
            if not self.running:
                break
            futures: list[Awaitable[Any]] = [future for _, future in self.running]
            finished, _ = await DBOS.asyncio_wait(
                futures,
                timeout=max(0.0, deadline - time.time()),
                return_when=asyncio.FIRST_COMPLETED,
            )
            if not finished:
                timed_out = True
                break
            for unit, future in list(self.running):
                if future in finished:
                    self.running.remove((unit, future))
                    await self._finish(unit, _result_of(future))
        return await self._end(timed_out)

    # -- starting -------------------------------------------------------------------------

    async def _start_ready(self) -> None:
        changed = True
        while changed and self.failure is None:
            changed = False
            for step_id in self.graph.order:
                if step_id in self.started:
                    continue
                node = self.graph.nodes[step_id]
                if not all(dep in self.done for dep in node.depends_on):
                    continue
                self.started.add(step_id)
                changed = True
                await self._begin(node)
                if self.failure is not None:
                    return
        await self._launch_queued()

    async def _begin(self, node: Node) -> None:
        budget = self._budget_spent()
        if budget is not None:
            self.failure = _Failure(node.id, "budget_exceeded", budget)
            return
        scope = self._scope()
        try:
            if node.when is not None and not node.when.evaluate(scope):
                self.outputs[node.id] = None
                self.done.add(node.id)
                await self._move(
                    node.id, StepState.SKIPPED, ended_at=_now(), event={"when": node.when.text}
                )
                return
            if node.for_each is not None:
                from sandgate.workflows.expressions import resolve

                elements = resolve(node.for_each, scope)
                if not isinstance(elements, list):
                    raise ExpressionError(f"for_each ${{{node.for_each.text}}} is not a list")
                if len(elements) > MAX_ITEMS:
                    raise ExpressionError(
                        f"for_each ${{{node.for_each.text}}} has {len(elements)} elements; "
                        f"at most {MAX_ITEMS}"
                    )
                self.items[node.id] = elements
                await self._records(
                    self.engine.records.update_step, self.run_id, node.id, items_total=len(elements)
                )
                known = self.item_outputs.setdefault(node.id, {})
                if len(known) >= len(elements):
                    await self._complete_loop(node.id)
                    return
                for index in range(len(elements)):
                    if index not in known:
                        self.queue.append(_Unit(node.id, index))
                return
            self.queue.append(_Unit(node.id, None))
        except ExpressionError as exc:
            await self._fail_step(node.id, "invalid_reference", f"step {node.id}: {exc}")

    async def _launch_queued(self) -> None:
        waiting: list[_Unit] = []
        for unit in self.queue:
            if len(self.running) >= self.workflow.concurrency:
                waiting.append(unit)
                continue
            node = self.graph.nodes[unit.step]
            if unit.index is not None:
                busy = sum(1 for u, _ in self.running if u.step == unit.step)
                if busy >= node.step.concurrency:
                    waiting.append(unit)
                    continue
            try:
                spec = self._spec(node, unit)
            except ExpressionError as exc:
                await self._fail_step(unit.step, "invalid_reference", f"step {unit.label}: {exc}")
                waiting.extend(u for u in self.queue if u not in waiting and u != unit)
                break
            await self._move(unit.step, StepState.RUNNING, started_at=_now())
            with SetWorkflowID(f"{dbos_workflow_id(self.run_id, self.attempt)}-{unit.label}"):
                handle = await DBOS.start_workflow_async(
                    _step_workflow, self.run_id, self.attempt, unit.step, unit.index, spec
                )
            self.running.append((unit, asyncio.ensure_future(handle.get_result())))
        self.queue = [u for u in waiting if self.failure is None]

    def _spec(self, node: Node, unit: _Unit) -> dict[str, Any]:
        step = node.step
        scope = self._scope(unit)
        spec: dict[str, Any] = {
            "kind": step.kind,
            "workflow": self.workflow.name,
            "team": self.loaded["team"],
            "api_key": self.loaded["api_key"],
            "agent": getattr(step, "agent", None) or self.workflow.agent,
            "idempotent": step.idempotent,
            "retries": step.retries,
            "backoff_s": step.backoff_s,
            "timeout_s": step.timeout_s,
        }
        for name, template in node.templates.items():
            spec[name] = template.render(scope)
        if step.kind == "tool":
            spec["tool"] = step.tool
        elif step.kind == "code":
            spec.update(
                code=step.code,
                language=step.language,
                template=step.template,
                output_limit=step.output_limit,
            )
            if self.workflow.budgets.max_tool_calls is not None:
                # The script's calls spend the run's budget as they are made (the gateway
                # refuses the one past it); the count so far is a recorded value, so a
                # replay passes the same.
                spec["max_tool_calls"] = self.workflow.budgets.max_tool_calls
                spec["tool_calls_spent"] = self.tool_calls
        elif step.kind == "agent":
            spec["agent"] = step.agent
        elif step.kind == "approval":
            spec["on_deny"] = step.on_deny
            spec["agent"] = self.workflow.agent
        elif step.kind == "workflow":
            spec["child"] = step.workflow
        return spec

    def _scope(self, unit: _Unit | None = None) -> Scope:
        has_item = unit is not None and unit.index is not None
        index = unit.index if unit is not None else None
        return Scope(
            inputs=self.loaded["inputs"],
            outputs=self.outputs,
            run={"id": self.run_id, "workflow": self.workflow.name, "attempt": self.attempt},
            item=self.items[unit.step][index] if has_item and unit and index is not None else None,
            index=index,
            has_item=has_item,
        )

    def _budget_spent(self) -> str | None:
        budgets = self.workflow.budgets
        if budgets.max_tool_calls is not None and self.tool_calls >= budgets.max_tool_calls:
            return (
                f"the run used its tool-call budget ({self.tool_calls} of "
                f"budgets.max_tool_calls {budgets.max_tool_calls})"
            )
        if budgets.max_tokens is not None and self.tokens >= budgets.max_tokens:
            return (
                f"the run used its token budget ({self.tokens} of budgets.max_tokens "
                f"{budgets.max_tokens})"
            )
        return None

    # -- finishing ------------------------------------------------------------------------

    async def _finish(self, unit: _Unit, result: dict[str, Any]) -> None:
        self.tool_calls += int(result.get("tool_calls", 0))
        self.tokens += int(result.get("tokens", 0))
        # The run's usage is written with the step's move, in the same transaction.
        self.usage = {"tool_calls": self.tool_calls, "tokens": self.tokens}
        if not result["ok"]:
            state = (
                StepState.INTERRUPTED
                if result["state"] == "interrupted"
                else (StepState.CANCELLED if result["state"] == "cancelled" else StepState.FAILED)
            )
            await self._fail_step(
                unit.step,
                result["code"],
                result["message"],
                state=state,
                output=result.get("output"),
                detail=result.get("detail"),
            )
            return
        if unit.index is None:
            self.outputs[unit.step] = result["output"]
            self.done.add(unit.step)
            values: dict[str, Any] = {}
            if result.get("detail"):
                values["detail"] = result["detail"]
            await self._move(
                unit.step,
                StepState.COMPLETED,
                ended_at=_now(),
                output=result["output"],
                summary=summarize(result["output"]),
                event={"summary": summarize(result["output"])},
                **values,
            )
            return
        known = self.item_outputs.setdefault(unit.step, {})
        known[unit.index] = result["output"]
        await self._records(
            self.engine.records.item_done,
            self.run_id,
            unit.step,
            unit.index,
            result["output"],
            attempt=self.attempt,
            run_values=self._take_usage(),
        )
        if len(known) >= len(self.items[unit.step]):
            await self._complete_loop(unit.step)

    async def _complete_loop(self, step_id: str) -> None:
        known = self.item_outputs[step_id]
        output = [known[i] for i in range(len(self.items[step_id]))]
        self.outputs[step_id] = output
        self.done.add(step_id)
        await self._move(
            step_id,
            StepState.COMPLETED,
            ended_at=_now(),
            output=output,
            summary=summarize(output),
            event={"summary": summarize(output)},
        )

    async def _fail_step(
        self,
        step_id: str,
        code: str,
        message: str,
        *,
        state: StepState = StepState.FAILED,
        output: Any = None,
        detail: dict[str, Any] | None = None,
    ) -> None:
        if self.failure is None:
            run_state = "interrupted" if state is StepState.INTERRUPTED else "failed"
            self.failure = _Failure(step_id, code, message, run_state)
        values: dict[str, Any] = {"ended_at": _now(), "error": message, "error_code": code}
        if output is not None:
            values["output"] = output
        if detail:
            values["detail"] = detail
        await self._move(step_id, state, event={"code": code, "error": message}, **values)

    async def _end(self, timed_out: bool) -> dict[str, Any]:
        records = self.engine.records
        if timed_out:
            for unit, _ in self.running:
                await self._move(
                    unit.step,
                    StepState.CANCELLED,
                    ended_at=_now(),
                    error="the run timed out",
                    error_code="run_timed_out",
                )
            message = f"the run did not finish within timeout_s {self.workflow.timeout_s:g}"
            await self._records(
                records.move_run,
                self.run_id,
                RunState.TIMED_OUT.value,
                ended_at=_now(),
                error=message,
                error_code="run_timed_out",
                event={"error": message},
            )
            for unit, _ in self.running:
                await DBOS.cancel_workflow_async(
                    f"{dbos_workflow_id(self.run_id, self.attempt)}-{unit.label}"
                )
            return {
                "ok": False,
                "code": "run_timed_out",
                "message": message,
                "state": "failed",
                "output": None,
            }
        if self.failure is not None:
            failure = self.failure
            if failure.code == "budget_exceeded" and failure.step is not None:
                await self._move(
                    failure.step,
                    StepState.CANCELLED,
                    ended_at=_now(),
                    error=failure.message,
                    error_code=failure.code,
                )
            state = RunState.INTERRUPTED if failure.state == "interrupted" else RunState.FAILED
            await self._records(
                records.move_run,
                self.run_id,
                state.value,
                ended_at=_now(),
                error=failure.message,
                error_code=failure.code,
                failed_step=failure.step,
                event={"step": failure.step, "code": failure.code, "error": failure.message},
            )
            return {
                "ok": False,
                "code": failure.code,
                "message": failure.message,
                "state": "failed",
                "output": None,
                "tool_calls": 0,
                "tokens": 0,
            }
        try:
            output = (
                self.graph.output.render(self._scope())
                if self.graph.output is not None
                else dict(self.outputs)
            )
        except ExpressionError as exc:
            message = f"output: {exc}"
            await self._records(
                records.move_run,
                self.run_id,
                RunState.FAILED.value,
                ended_at=_now(),
                error=message,
                error_code="invalid_reference",
                event={"error": message},
            )
            return {
                "ok": False,
                "code": "invalid_reference",
                "message": message,
                "state": "failed",
                "output": None,
            }
        await self._records(
            records.move_run,
            self.run_id,
            RunState.COMPLETED.value,
            ended_at=_now(),
            output=output,
            event={"summary": summarize(output)},
        )
        return {
            "ok": True,
            "output": output,
            "code": "",
            "message": "",
            "state": "completed",
            "tool_calls": self.tool_calls,
            "tokens": self.tokens,
        }

    async def _move(
        self, step_id: str, to: StepState, *, event: dict[str, Any] | None = None, **values: Any
    ) -> None:
        await self._records(
            self.engine.records.move_step,
            self.run_id,
            step_id,
            to.value,
            attempt=self.attempt,
            event=event,
            run_values=self._take_usage(),
            **values,
        )

    def _take_usage(self) -> dict[str, Any] | None:
        usage, self.usage = self.usage, None
        return usage

    @staticmethod
    async def _records(method: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        return await asyncio.to_thread(method, *args, **kwargs)


def _result_of(future: asyncio.Future[Any]) -> dict[str, Any]:
    """A finished child's result; a cancelled or crashed child counts as a failed step."""
    try:
        result = future.result()
    except asyncio.CancelledError:
        return {
            "ok": False,
            "code": "step_cancelled",
            "message": "the step was cancelled",
            "state": "cancelled",
        }
    except Exception as exc:  # DBOS reports a cancelled or failed child by raising
        name = type(exc).__name__
        if "Cancel" in name:
            return {
                "ok": False,
                "code": "step_cancelled",
                "message": "the step was cancelled",
                "state": "cancelled",
            }
        log.error("workflow.step_crashed", error=repr(exc))
        return {
            "ok": False,
            "code": "internal",
            "message": f"the step crashed: {name}",
            "state": "failed",
        }
    return dict(result)
