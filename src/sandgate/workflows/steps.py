"""What each step kind does once it runs: ``tool``, ``code``, ``agent``, ``approval``.

Every executor returns an ``Outcome`` (never raises a ``SandgateError``) so that DBOS
checkpoints a plain value. Trust: the gateway decides every tool call, wherever it comes from:
a tool step calls ``Gateway.call`` exactly like a sandbox's socket does (policy, approval,
secrets, audit), and a code step's script calls tools over its sandbox's own socket. The
subject of those calls carries the workflow, run and step in its metadata
(``sandgate.workflow*``), which the audit records and the policy can match; those keys are
reserved: the E2B API refuses them, so only this module sets them.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import math
import time
from collections.abc import Coroutine, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import structlog

from sandgate._tasks import cancel_and_wait
from sandgate.access import Principal
from sandgate.approvals import ApprovalState
from sandgate.errors import NotFound, SandgateError
from sandgate.guest.client import Ended, GuestError, Output
from sandgate.policy import Subject
from sandgate.sandboxes import CreateRequest
from sandgate.tools import AGENT_METADATA_KEY
from sandgate.tools.budgets import RunBudget
from sandgate.workflows.metadata import (
    RUN_METADATA_KEY,
    STEP_METADATA_KEY,
    WORKFLOW_METADATA_KEY,
)

if TYPE_CHECKING:
    from sandgate.agents import AgentRunner
    from sandgate.sandboxes import SandboxService
    from sandgate.store import Store
    from sandgate.tools import Gateway

__all__ = [
    "Outcome",
    "StepContext",
    "StepExecutors",
    "approval_id_for",
    "workflow_metadata",
]

log = structlog.get_logger("sandgate.workflows")

#: Where a code step's script finds its inputs and leaves its result (inside its sandbox).
_WORK = "/tmp/sandgate-step"
_INPUT = f"{_WORK}/input.json"
_OUTPUT = f"{_WORK}/output.json"
_MAX_RESULT_BYTES = 1024 * 1024
#: Error codes worth another attempt of an idempotent step (the rest fail the same way again).
RETRYABLE = frozenset(
    {
        "tool_failed",
        "tool_timeout",
        "rate_limited",
        "step_timeout",
        "sandbox_unavailable",
        "runtime_unavailable",
        "code_failed",
    }
)


@dataclass
class Outcome:
    """One attempt's result, as checkpointed: JSON data only."""

    ok: bool
    output: Any = None
    code: str = ""
    message: str = ""
    #: The step's state when it did not complete: failed, interrupted or cancelled.
    state: str = "completed"
    tool_calls: int = 0
    tokens: int = 0
    detail: dict[str, Any] = field(default_factory=dict)

    @property
    def retryable(self) -> bool:
        return not self.ok and self.code in RETRYABLE

    def data(self) -> dict[str, Any]:
        return {
            "ok": self.ok,
            "output": self.output,
            "code": self.code,
            "message": self.message,
            "state": self.state,
            "tool_calls": self.tool_calls,
            "tokens": self.tokens,
            "detail": self.detail,
        }

    @classmethod
    def failed(cls, code: str, message: str, **values: Any) -> Outcome:
        return cls(False, code=code, message=message, state="failed", **values)


@dataclass(frozen=True)
class StepContext:
    """Who a step acts for and where it is (the same for every attempt)."""

    run_id: str
    attempt: int
    workflow: str
    step_id: str
    index: int | None
    team_id: str
    api_key_id: str | None
    agent: str | None

    @property
    def label(self) -> str:
        return self.step_id if self.index is None else f"{self.step_id}[{self.index}]"

    @property
    def principal(self) -> Principal:
        return Principal(team_id=self.team_id, api_key_id=self.api_key_id or "workflow")


def workflow_metadata(context: StepContext) -> dict[str, str]:
    """The reserved metadata naming the workflow, run and step (see module docstring)."""
    return {
        WORKFLOW_METADATA_KEY: context.workflow,
        RUN_METADATA_KEY: context.run_id,
        STEP_METADATA_KEY: context.label,
    }


def approval_id_for(context: StepContext) -> str:
    """The approval of an approval step: the same id for every execution of the same attempt,
    so a step re-run after a crash finds the approval it asked for instead of asking again."""
    seed = f"{context.run_id}:{context.attempt}:{context.label}"
    return "apr_" + hashlib.sha256(seed.encode()).hexdigest()[:16]


class StepExecutors:
    """The services the step kinds use; one per server."""

    def __init__(
        self,
        gateway: Gateway,
        sandboxes: SandboxService,
        agents: AgentRunner,
        store: Store,
        *,
        agent_teams: Mapping[str, list[str]],
    ) -> None:
        self._gateway = gateway
        self._sandboxes = sandboxes
        self._agents = agents
        self._store = store
        self._agent_teams = dict(agent_teams)

    @property
    def gateway(self) -> Gateway:
        return self._gateway

    async def run(
        self, context: StepContext, spec: dict[str, Any], timeout_s: float | None
    ) -> Outcome:
        """Runs one attempt of a tool, code or agent step within ``timeout_s``."""
        kind = spec["kind"]
        if kind == "tool":
            work = self._tool(context, spec)
        elif kind == "code":
            work = self._code(context, spec)
        else:
            work = self._agent(context, spec)
        task = asyncio.ensure_future(work)
        try:
            # Shielded: a timed-out tool call still finishes its pipeline (and its audit
            # record) in the background; a code step's sandbox is killed by its own finally.
            async with asyncio.timeout(timeout_s):
                return await asyncio.shield(task)
        except TimeoutError:
            if kind != "tool":
                task.cancel()
            return Outcome.failed(
                "step_timeout", f"step {context.label} did not finish within {timeout_s:g}s"
            )
        except SandgateError as exc:
            return Outcome.failed(exc.code, exc.message)

    # -- tool -----------------------------------------------------------------------------

    async def _tool(self, context: StepContext, spec: dict[str, Any]) -> Outcome:
        subject = Subject(
            sandbox_id=context.run_id,
            team_id=context.team_id,
            api_key_id=context.api_key_id,
            agent=context.agent,
            metadata=workflow_metadata(context),
        )
        result = await self._gateway.call(subject, spec["tool"], spec.get("arguments", {}))
        if result.ok:
            return Outcome(True, output=result.result, tool_calls=1)
        return Outcome.failed(result.code, result.message, tool_calls=1)

    # -- code -----------------------------------------------------------------------------

    async def _code(self, context: StepContext, spec: dict[str, Any]) -> Outcome:
        metadata = workflow_metadata(context)
        if context.agent is not None:
            metadata[AGENT_METADATA_KEY] = context.agent
        sandbox = await self._sandboxes.create(
            context.principal,
            CreateRequest(
                template=spec.get("template", "base"),
                timeout_s=int(min(86400, max(300, (spec.get("timeout_s") or 3600) + 300))),
                metadata=metadata,
                envs={},
            ),
        )
        detail = {"sandbox": sandbox.id}
        budget = self._open_budget(context, spec, sandbox.id)
        try:
            route = self._sandboxes.route(sandbox.id)
            if route is None:
                return Outcome.failed(
                    "sandbox_unavailable", f"sandbox {sandbox.id} stopped before the code ran"
                )
            guest = route.guest
            try:
                await guest.write_file(
                    _INPUT, json.dumps(spec.get("inputs", {})).encode(), user="user"
                )
                language = spec.get("language", "python")
                script = f"{_WORK}/step.{'py' if language == 'python' else 'sh'}"
                await guest.write_file(script, spec["code"].encode(), user="user")
                stream = await guest.spawn(
                    "python3" if language == "python" else "/bin/bash",
                    [script],
                    envs={"SANDGATE_STEP_INPUT": _INPUT, "SANDGATE_STEP_OUTPUT": _OUTPUT},
                    cwd="/home/user",
                    user="user",
                )
                limit = int(spec.get("output_limit", 8000))
                out, err = _Tail(limit), _Tail(limit)
                exit_code = -1

                async def follow() -> None:
                    nonlocal exit_code
                    async for event in stream:
                        if isinstance(event, Output):
                            (err if event.stream == "stderr" else out).add(event.data)
                        elif isinstance(event, Ended):
                            exit_code = event.exit_code

                await _until_refused(follow(), budget)
                result = await _read_result(guest) if _budget_ok(budget) else None
            except GuestError as exc:
                return Outcome.failed(
                    "sandbox_unavailable",
                    f"the sandbox could not run step {context.label}: {exc.message}",
                    detail=detail,
                )
        finally:
            killed = False
            with contextlib.suppress(SandgateError):
                await self._sandboxes.kill_any(sandbox.id)
                killed = True
            if budget is not None and killed:
                # SECURITY: closed only once the sandbox is gone; a script still running
                # after the refusal would otherwise make calls that no budget counts (if the
                # kill failed, the budget stays open and keeps counting until the server
                # stops).
                self._gateway.run_budgets.close(sandbox.id, budget)
        calls = self._tool_calls_of(sandbox.id)
        output = {
            "exit_code": exit_code,
            "result": result,
            "stdout": out.text(),
            "stderr": err.text(),
        }
        if budget is not None and budget.refused is not None:
            # The script was stopped at its first refused call, whatever it did with the error.
            return Outcome.failed(
                "budget_exceeded",
                f"step {context.label}: {budget.refused.message}",
                output=output,
                tool_calls=calls,
                detail=detail,
            )
        if exit_code != 0:
            return Outcome.failed(
                "code_failed",
                f"step {context.label}: the script exited with {exit_code}: "
                + (err.text()[-500:].strip() or "(no stderr)"),
                output=output,
                tool_calls=calls,
                detail=detail,
            )
        return Outcome(True, output=output, tool_calls=calls, detail=detail)

    def _open_budget(
        self, context: StepContext, spec: dict[str, Any], sandbox_id: str
    ) -> RunBudget | None:
        """The run's tool-call budget, spent by every call the script makes from its sandbox
        (``tools.budgets``, as for an agent run); None when the workflow sets none."""
        if spec.get("max_tool_calls") is None:
            return None
        budget = self._gateway.run_budgets.open(
            sandbox_id,
            context.run_id,
            max_tool_calls=int(spec["max_tool_calls"]),
            # The run's own timeout_s bounds its time; this budget counts calls only.
            wall_clock_s=math.inf,
        )
        budget.spent = int(spec.get("tool_calls_spent", 0))
        return budget

    def _tool_calls_of(self, sandbox_id: str) -> int:
        rows = self._store.audit_entries(sandbox_id=sandbox_id, limit=100_000)
        return sum(1 for row in rows if row.event == "tool.call")

    # -- agent ----------------------------------------------------------------------------

    async def _agent(self, context: StepContext, spec: dict[str, Any]) -> Outcome:
        agent = spec["agent"]
        teams = self._agent_teams.get(agent, [])
        if teams and context.team_id not in teams:
            return Outcome.failed("forbidden", f"agent '{agent}' does not act for this team")
        run = await self._agents.submit(context.principal, agent, spec["message"])
        final = await self._agents.wait(run.id)
        tokens = final.prompt_tokens + final.completion_tokens
        detail = {"agent_run": final.id, "sandbox_session": final.session_id}
        output = {"answer": final.answer, "agent_run": final.id, "stop_reason": final.stop_reason}
        if final.state != "completed":
            return Outcome.failed(
                final.stop_reason or "agent_failed",
                f"agent run {final.id} {final.state}: {final.error or final.stop_reason}",
                output=output,
                tool_calls=final.tool_calls,
                tokens=tokens,
                detail=detail,
            )
        return Outcome(
            True, output=output, tool_calls=final.tool_calls, tokens=tokens, detail=detail
        )

    # -- approval -------------------------------------------------------------------------

    async def request_approval(
        self, context: StepContext, spec: dict[str, Any], timeout_s: float | None
    ) -> str:
        """Asks for (or finds again) the step's approval; returns its id."""
        approval_id = approval_id_for(context)
        approvals = self._gateway.approvals
        with contextlib.suppress(NotFound):
            approvals.get(approval_id)
            return approval_id
        subject = {
            "sandbox": context.run_id,
            "team": context.team_id,
            "api_key": context.api_key_id,
            "agent": context.agent,
            "workflow": {"name": context.workflow, "run": context.run_id, "step": context.label},
        }
        await approvals.request(
            sandbox_id=context.run_id,
            subject=subject,
            tool=f"workflow:{context.workflow}",
            action=context.label,
            arguments={"message": spec["message"], "details": spec.get("details")},
            rule_id="workflow-approval",
            timeout_s=timeout_s,
            approval_id=approval_id,
        )
        await asyncio.to_thread(
            self._gateway.audit.append,
            {
                "event": "workflow.approval",
                "sandbox": context.run_id,
                "subject": subject,
                "approval": approval_id,
                "outcome": "pending",
            },
        )
        return approval_id

    async def await_decision(self, context: StepContext, approval_id: str) -> Outcome:
        """Waits for the decision (its deadline is the approval's own, so a wait resumed after
        a restart does not start the clock again); expiry denies."""
        final = await self._gateway.approvals.wait(approval_id)
        approved = final.state is ApprovalState.APPROVED
        output = {
            "approved": approved,
            "state": final.state.value,
            "approval": approval_id,
            "decided_by": final.decided_by,
        }
        await asyncio.to_thread(
            self._gateway.audit.append,
            {
                "event": "workflow.approval",
                "sandbox": context.run_id,
                "subject": {
                    "team": context.team_id,
                    "workflow": {
                        "name": context.workflow,
                        "run": context.run_id,
                        "step": context.label,
                    },
                },
                "approval": approval_id,
                "outcome": final.state.value,
            },
        )
        if approved:
            return Outcome(True, output=output)
        why = "nobody answered in time" if final.state is ApprovalState.EXPIRED else "denied"
        return Outcome(
            False,
            output=output,
            code="approval_denied",
            message=f"step {context.label}: approval {approval_id} was {final.state.value} ({why})",
            state="failed",
        )


def _budget_ok(budget: RunBudget | None) -> bool:
    return budget is None or budget.refused is None


async def _until_refused(work: Coroutine[Any, Any, None], budget: RunBudget | None) -> None:
    """Runs ``work`` (following the script) until it ends or ``budget`` refuses a call, which
    stops it at once: the sandbox is killed next, so the script cannot go on without calls."""
    task = asyncio.ensure_future(work)
    if budget is None:
        await task
        return
    refused = asyncio.ensure_future(budget.exceeded.wait())
    try:
        await asyncio.wait({task, refused}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        refused.cancel()
        if not task.done():
            await cancel_and_wait(task, absorb=())
    if task.done() and not task.cancelled():
        task.result()


async def _read_result(guest: Any) -> Any:
    """The JSON the script left in ``$SANDGATE_STEP_OUTPUT``, or None."""
    try:
        reader = await guest.read_file(_OUTPUT, user="user", length=_MAX_RESULT_BYTES + 1)
        data = await reader.read_all()
    except GuestError:
        return None
    if len(data) > _MAX_RESULT_BYTES:
        return {"error": f"the result file is larger than {_MAX_RESULT_BYTES} bytes"}
    try:
        return json.loads(data)
    except ValueError:
        return {
            "error": "the result file is not JSON",
            "text": data[:2000].decode(errors="replace"),
        }


class _Tail:
    def __init__(self, limit: int) -> None:
        self._limit = limit
        self._data = bytearray()

    def add(self, data: bytes) -> None:
        self._data += data
        if len(self._data) > self._limit * 4:
            del self._data[: len(self._data) - self._limit * 4]

    def text(self) -> str:
        return self._data.decode("utf-8", "replace")[-self._limit :]


def elapsed_ms(started: float) -> float:
    return round((time.monotonic() - started) * 1000, 3)
