"""The agent loop. ``run_loop`` is the whole algorithm; ``Turn`` holds what it works with.

Blame (as in smolagents): a model that writes bad code, calls a tool badly or replies in an
unreadable way has made a mistake that is recorded on its step and shown to it next turn. A
failure of ours or of the infrastructure (``ModelUnavailable``, ``SandboxUnavailable``)
propagates and fails the run.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from sandgate.agents._gateway import GatewayAdapter
from sandgate.agents.actions import Action, CallTools, FinalAnswer, Malformed, RunCode, parse_action
from sandgate.agents.execution import SandboxCode
from sandgate.agents.prompting import observation, prompt
from sandgate.agents.providers import Message, ModelReply, ModelRequest, ModelRouter, ToolSpec
from sandgate.agents.steps import CodeStep, ModelStep, RunState, ToolStep
from sandgate.agents.stops import Progress, StopCheck, first_stop
from sandgate.config import AgentConfig, ModelChoice
from sandgate.observability import tracing
from sandgate.store import Sandbox
from sandgate.tools.budgets import RunBudget

__all__ = ["Emit", "Outcome", "Turn", "run_loop"]

Emit = Callable[[str, dict[str, Any]], None]
_WATCH_INTERVAL_S = 0.1


@dataclass(frozen=True)
class Outcome:
    state: RunState
    stop_reason: str
    answer: str | None = None
    error: str | None = None


async def run_loop(turn: Turn) -> Outcome:
    """Think, act, repeat: until the model answers or a stop check fires."""
    while True:
        stop = first_stop(turn.checks, turn.progress)
        if stop is not None:
            return Outcome(RunState.STOPPED, stop.name, error=stop.message(turn.progress))
        step = await turn.think()
        if step is None:
            continue  # the model call ran out of wall clock; the stop check says so
        action = parse_action(step.text, step.tool_calls, turn.agent.language)
        turn.progress.actions.append(action.key)
        if isinstance(action, FinalAnswer):
            return Outcome(RunState.COMPLETED, "final_answer", answer=action.text)
        await turn.act(action, step.number)


@dataclass
class Turn:
    """One run's working state. ``messages`` is the whole conversation, session history
    included; the runner stores it when the run ends."""

    agent: AgentConfig
    system: str
    messages: list[Message]
    router: ModelRouter
    code: SandboxCode
    gateway: GatewayAdapter
    sandbox: Sandbox
    emit: Emit
    checks: list[StopCheck]
    progress: Progress
    tools: tuple[ToolSpec, ...] = ()
    #: The run's tool-call budget, which the gateway spends at every call of the sandbox.
    budget: RunBudget | None = None
    _reported: set[int] = field(default_factory=set)
    _asked: set[str] = field(default_factory=set)

    async def think(self) -> ModelStep | None:
        """One model round trip (with retries and fallbacks); None if the wall clock ran out."""
        step = ModelStep(number=self.progress.steps + 1)
        request = ModelRequest(
            model="",
            system=self.system,
            messages=tuple(self.messages),
            max_tokens=self.agent.max_tokens,
            temperature=self.agent.temperature,
            tools=self.tools,
        )
        self.emit("model.request", {"step": step.number, "messages": len(self.messages)})
        started = time.monotonic()
        with tracing.span("agent.model", step=step.number) as span:
            answered = await self._complete(step, request)
            if answered is None:
                return None
            choice, reply = answered
            span.set(
                model=f"{choice.provider}/{reply.model}",
                tokens__prompt=reply.prompt_tokens,
                tokens__completion=reply.completion_tokens,
            )
        step.model = f"{choice.provider}/{reply.model}"
        step.text, step.tool_calls = reply.text, reply.tool_calls
        step.prompt_tokens, step.completion_tokens = reply.prompt_tokens, reply.completion_tokens
        step.duration_ms = round((time.monotonic() - started) * 1000, 3)
        self.progress.steps += 1
        usage = self.progress.usage
        usage.model_calls += 1
        usage.prompt_tokens += reply.prompt_tokens
        usage.completion_tokens += reply.completion_tokens
        self.messages.append(Message("assistant", reply.text, reply.tool_calls))
        self.emit(*step.event())
        return step

    async def _complete(
        self, step: ModelStep, request: ModelRequest
    ) -> tuple[ModelChoice, ModelReply] | None:
        """The model's reply through the router (retries, fallbacks); None when the run's
        wall clock ran out first."""
        try:
            async with asyncio.timeout(self.progress.remaining_s()):
                return await self.router.complete(
                    self.agent.models,
                    request,
                    step.attempts,
                    lambda old, new, why: self.emit(
                        "model.fallback",
                        {
                            "step": step.number,
                            "from": f"{old.provider}/{old.model}",
                            "to": f"{new.provider}/{new.model}",
                            "reason": why,
                        },
                    ),
                )
        except TimeoutError:
            self.progress.steps += 1
            return None

    async def act(self, action: Action, number: int) -> None:
        """Runs the action and appends what the model should see next."""
        if isinstance(action, Malformed):
            self.messages.append(Message("user", prompt("no_code", language=action.language)))
        elif isinstance(action, RunCode):
            await self._run_code(CodeStep(number, action.language, action.code))
        elif isinstance(action, CallTools):
            for call in action.calls:
                await self._call_tool(number, call.id, call.name, call.arguments)
                if self._budget_refused():
                    break

    def _budget_refused(self) -> bool:
        if self.budget is not None and self.budget.refused is not None:
            self.progress.refused = self.budget.refused.message
        return self.progress.refused is not None

    async def _run_until_refused(self, step: CodeStep, timeout_s: float) -> None:
        """Runs the code; a tool call the run's budget refuses interrupts it at once."""
        if self.budget is None:
            await self.code.run(step, timeout_s)
            return
        running = asyncio.create_task(self.code.run(step, timeout_s))
        refused = asyncio.create_task(self.budget.exceeded.wait())
        try:
            await asyncio.wait({running, refused}, return_when=asyncio.FIRST_COMPLETED)
            if not running.done():
                await self.code.interrupt()
                step.notes.append("the run's tool-call budget was exceeded; the code was stopped")
            await running
        finally:
            refused.cancel()
            running.cancel()

    async def _run_code(self, step: CodeStep) -> None:
        self.emit(*step.started())
        position = self.gateway.audit_position()
        watcher = asyncio.create_task(self._watch(position, step.number))
        try:
            timeout = min(self.agent.sandbox.code_timeout_s, max(1.0, self.progress.remaining_s()))
            with tracing.span("agent.code", step=step.number, language=step.language) as span:
                await self._run_until_refused(step, timeout)
                span.set(exit_code=step.exit_code)
        finally:
            watcher.cancel()
        self._budget_refused()
        self._report_calls(position, step.number)
        self.emit(*step.event())
        self.messages.append(
            Message(
                "user",
                observation(
                    step.exit_code if step.exit_code is not None else -1,
                    step.stdout,
                    step.stderr,
                    step.duration_ms / 1000,
                    step.notes,
                ),
            )
        )

    async def _call_tool(
        self, number: int, call_id: str, name: str, arguments: dict[str, Any]
    ) -> None:
        if name not in {spec.name for spec in self.tools}:
            refusal = {
                "ok": False,
                "error": {
                    "code": "policy_denied",
                    "message": f"{name} is not one of the tools offered to this agent",
                },
            }
            self.messages.append(Message("tool", json.dumps(refusal), tool_call_id=call_id))
            return
        pending = ToolStep(number, name, None, "pending", None, None, None, arguments)
        self.emit(*pending.started())
        position = self.gateway.audit_position()
        watcher = asyncio.create_task(self._watch(position, number, report=False))
        try:
            result = await self.gateway.call(self.sandbox, name, arguments)
        finally:
            watcher.cancel()
        self._report_calls(position, number, arguments)
        content = json.dumps(result.wire(), default=str)
        self.messages.append(Message("tool", content, tool_call_id=call_id))

    async def _watch(self, position: int, number: int, *, report: bool = True) -> None:
        """While code runs: report its tool calls and approvals as they happen."""
        while True:
            if report:
                self._report_calls(position, number)
            for approval in self.gateway.pending_approvals(self.sandbox.id):
                if approval.id not in self._asked:
                    self._asked.add(approval.id)
                    self.emit(
                        "approval.required",
                        {
                            "step": number,
                            "approval": approval.id,
                            "tool": approval.tool,
                            "action": approval.action,
                            "arguments": approval.arguments,
                            "rule": approval.rule_id,
                            "expires_at": approval.expires_at,
                        },
                    )
            await asyncio.sleep(_WATCH_INTERVAL_S)

    def _report_calls(
        self, position: int, number: int, arguments: dict[str, Any] | None = None
    ) -> None:
        fresh = [
            s
            for s in self.gateway.tool_calls(self.sandbox.id, position, number)
            if s.audit_seq not in self._reported
        ]
        for step in fresh:
            self._reported.add(step.audit_seq or 0)
            step.arguments = arguments
            self.progress.usage.tool_calls += 1
            self.emit(*step.event())
