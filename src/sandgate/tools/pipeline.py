"""The tool call: validate → policy → replay → approval → secrets → execute, then
redact → truncate → remember → audit, for every call, whatever happened.

This is the only place a tool is executed. ``Gateway.call`` reads as the two lists below; each
stage is ``async (call) -> None``, reads and writes only the per-call ``Call`` record, and
stops the call by raising a ``SandgateError``. The finishing stages always run, so every call
(allowed, denied, invalid, failed, timed out) leaves exactly one audit record.

Trust: the caller (code in a sandbox) is untrusted: its tool name is canonicalised, its
arguments validated, and nothing in the payload says who it is (``Subject`` comes from the
socket, see ``tools.socket``). Secrets exist in ``call.secrets`` only from the secrets stage
until execution ends, and every result and error passes the redactor before it leaves.
If the audit log cannot be written the call fails closed with ``audit_unavailable``, and no
tool runs while the log directory is unwritable (checked before execution).
"""

from __future__ import annotations

import asyncio
import hashlib
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import structlog

from sandgate.approvals import ApprovalService, ApprovalState
from sandgate.audit import AuditLog, canonical
from sandgate.errors import (
    ApprovalDenied,
    AuditUnavailable,
    BudgetExceeded,
    InvalidArguments,
    InvalidRequest,
    PolicyDenied,
    RateLimited,
    SandgateError,
    ToolFailed,
    ToolTimeout,
    error_for_code,
)
from sandgate.observability import tracing
from sandgate.policy import DEFAULT_DENY, CallBudget, Decision, PolicyEngine, RateLimiter, Subject
from sandgate.secrets import Redactor, SecretStore
from sandgate.tools.budgets import RunBudget, RunBudgets
from sandgate.tools.executors._output import TRUNCATION_MARKER
from sandgate.tools.names import canonical_name
from sandgate.tools.registry import ToolRegistry
from sandgate.tools.scope import AGENT_TOOLS, AgentScope
from sandgate.tools.tool import Tool, ToolContext
from sandgate.tools.validation import validate_arguments

__all__ = ["RUN_BUDGET", "Call", "CallResult", "Gateway"]

log = structlog.get_logger("sandgate.tools")

#: The rule id audited when an agent run's budget refuses a call.
RUN_BUDGET = "run-budget"
#: Idempotency keys remembered per gateway (oldest forgotten first).
_IDEMPOTENCY_CAPACITY = 10_000
_KEY_LIMIT = 200


@dataclass(frozen=True)
class CallResult:
    """What the caller gets back: a result, or an error with a stable code."""

    ok: bool
    result: Any = None
    truncated: bool = False
    code: str = ""
    message: str = ""
    status: int = 200

    def wire(self) -> dict[str, Any]:
        if self.ok:
            return {"ok": True, "result": self.result, "truncated": self.truncated}
        return {
            "ok": False,
            "error": {"code": self.code, "message": self.message, "status": self.status},
        }


@dataclass
class Call:
    """Per-call state passed along the pipeline (never kept on the gateway)."""

    subject: Subject
    requested: Any
    raw_arguments: Any
    idempotency_key: str | None
    started: float = field(default_factory=time.monotonic)
    tool: Tool | None = None
    arguments: dict[str, Any] = field(default_factory=dict)
    action: str | None = None
    decision: Decision | None = None
    approval_id: str | None = None
    secrets: dict[str, str] = field(default_factory=dict)
    result: Any = None
    truncated: bool = False
    error: SandgateError | None = None
    replayed: bool = False
    owned_key: tuple[str, str, str] | None = None
    attempts: int = 0
    #: Built once per call, when first needed (``Gateway._redactor``).
    redactor: Redactor | None = None


Stage = Callable[[Call], Awaitable[None]]


class Gateway:
    """Holds the services a call passes through; ``call`` is the pipeline."""

    def __init__(
        self,
        *,
        registry: ToolRegistry,
        policy: PolicyEngine,
        approvals: ApprovalService,
        secrets: SecretStore,
        audit: AuditLog,
        home: Path,
        budget_per_sandbox: int | None = None,
        scope: AgentScope | None = None,
    ) -> None:
        self.registry = registry
        self.scope = scope or AgentScope(())
        self.policy = policy
        self.approvals = approvals
        self.secrets = secrets
        self.audit = audit
        self._home = home
        self._limiter = RateLimiter()
        self._budget = CallBudget(budget_per_sandbox)
        #: Budgets of the agent runs active in this process, by sandbox (``tools.budgets``).
        self.run_budgets = RunBudgets()
        self._remembered: OrderedDict[
            tuple[str, str, str], tuple[str, asyncio.Future[CallResult]]
        ] = OrderedDict()
        self._decide_stages: tuple[Stage, ...] = (
            self._spend_run_budget,
            self._validate,
            self._decide,
            self._replay,
            self._approve,
            self._inject_secrets,
            self._execute,
        )
        self._finish_stages: tuple[Stage, ...] = (
            self._filter_output,
            self._redact,
            self._truncate,
            self._remember,
            self._audit,
        )
        #: Told of each call's tool (``None`` if it named none registered) and audited
        #: outcome (the metrics); must be quick and must not raise.
        self.on_call: Callable[[str | None, str], None] | None = None

    async def call(
        self,
        subject: Subject,
        name: Any,
        arguments: Any,
        idempotency_key: str | None = None,
        *,
        traceparent: str | None = None,
    ) -> CallResult:
        """Runs one call through every stage; never raises a ``SandgateError`` (the result
        carries it). Runs to completion even if the caller goes away. ``traceparent`` (from
        the calling process) is the parent of the call's span when tracing is on."""
        call = Call(subject, name, arguments, idempotency_key)
        ids = _span_ids(subject, self.run_budgets.get(subject.sandbox_id))
        with tracing.span("tool.call", parent=traceparent, **ids) as span:
            try:
                for stage in self._decide_stages:
                    await stage(call)
            except SandgateError as exc:
                call.error = exc
            finally:
                call.secrets = {}
            try:
                for stage in self._finish_stages:
                    await stage(call)
            except AuditUnavailable as exc:
                call.error, call.result = exc, None
            finally:
                self._release_key(call)
            tool, outcome = call.tool.name if call.tool else None, outcome_of(call.error)
            span.set(tool=tool, outcome=outcome)
            if self.on_call is not None:
                self.on_call(tool, outcome)
        return _result(call)

    def visible_tools(self, subject: Subject) -> list[Tool]:
        """Tools in the subject's agent scope some call of which the policy could allow (for
        stubs, the MCP listing and the agent's prompt)."""
        return [
            t
            for t in self.registry.all()
            if self.scope.allows(subject.agent, t.name) and self.policy.may_use(subject, t.name)
        ]

    def dry_run(self, subject: Subject, name: Any, arguments: Any) -> dict[str, Any]:
        """What the policy would decide, without rate limits, budgets, execution or audit."""
        call = Call(subject, name, arguments, None)
        try:
            self._resolve_and_validate(call)
        except SandgateError as exc:
            rule = call.decision.rule_id if call.decision else DEFAULT_DENY
            return {"effect": "deny", "rule": rule, "error": exc.message}
        decision = self._decision(call)
        return {"effect": decision.effect, "rule": decision.rule_id, "reason": decision.reason}

    def forget_sandbox(self, sandbox_id: str) -> None:
        self._limiter.forget(("sandbox", sandbox_id))
        self._budget.forget(sandbox_id)
        for key in [k for k in self._remembered if k[0] == sandbox_id]:
            del self._remembered[key]

    # -- deciding stages ------------------------------------------------------------------

    async def _spend_run_budget(self, call: Call) -> None:
        """An active agent run's budget is spent by every call, before anything else."""
        budget = self.run_budgets.get(call.subject.sandbox_id)
        if budget is None:
            return
        try:
            budget.spend(str(call.requested)[:100])
        except BudgetExceeded as exc:
            call.decision = Decision("deny", RUN_BUDGET, detail=exc.message)
            raise

    async def _validate(self, call: Call) -> None:
        self._resolve_and_validate(call)

    async def _decide(self, call: Call) -> None:
        with tracing.span("tool.policy", tool=_tool(call).name) as span:
            call.decision = decision = self._decision(call)
            span.set(effect=decision.effect, rule=decision.rule_id)
        if decision.effect == "deny":
            raise PolicyDenied(f"{_label(call)}: {decision.reason}")
        rule = decision.rule
        if rule is not None and rule.rate_limit is not None:
            limit = rule.rate_limit
            who = {
                "sandbox": call.subject.sandbox_id,
                "agent": call.subject.agent or call.subject.sandbox_id,
                "team": call.subject.team_id,
            }[limit.per]
            key = (limit.per, who, rule.id, _tool(call).name)
            if not self._limiter.acquire(key, limit.calls, limit.window_s, time.monotonic()):
                raise RateLimited(
                    f"{_label(call)}: rate limit of rule '{rule.id}' reached "
                    f"({limit.calls} calls per {limit.window_s:g}s per {limit.per}); retry later"
                )
        if not self._budget.spend(call.subject.sandbox_id):
            raise BudgetExceeded(
                f"{_label(call)}: this sandbox has used its tool-call budget "
                "(policy.budget_per_sandbox)"
            )

    async def _replay(self, call: Call) -> None:
        """A repeated idempotency key returns the first call's result (GW-16)."""
        key = call.idempotency_key
        if key is None:
            return
        if not isinstance(key, str) or not 0 < len(key) <= _KEY_LIMIT:
            raise InvalidRequest(f"idempotency_key must be a string of 1..{_KEY_LIMIT} chars")
        slot = (call.subject.sandbox_id, _tool(call).name, key)
        digest = _digest(call.arguments)
        remembered = self._remembered.get(slot)
        if remembered is None:
            self._remembered[slot] = (digest, asyncio.get_running_loop().create_future())
            call.owned_key = slot
            while len(self._remembered) > _IDEMPOTENCY_CAPACITY:
                self._remembered.popitem(last=False)
            return
        if remembered[0] != digest:
            raise InvalidArguments(
                f"{_label(call)}: idempotency_key '{key}' was used with other arguments"
            )
        first = await asyncio.shield(remembered[1])
        call.replayed = True
        if not first.ok:
            # Exactly the first answer: its class (so its audit outcome), code and status.
            raise error_for_code(first.code, first.message, first.status)
        call.result, call.truncated = first.result, first.truncated

    async def _approve(self, call: Call) -> None:
        decision = call.decision
        if call.replayed or decision is None or decision.effect != "ask":
            return
        redactor = self._redactor(call)
        pending = await self.approvals.request(
            sandbox_id=call.subject.sandbox_id,
            subject=call.subject.as_dict(),
            tool=_tool(call).name,
            action=call.action,
            arguments=redactor.redact(call.arguments),
            rule_id=decision.rule_id,
            timeout_s=decision.rule.approval_timeout_s if decision.rule else None,
        )
        call.approval_id = pending.id
        final = await self.approvals.wait(pending.id)
        if final.state is not ApprovalState.APPROVED:
            raise ApprovalDenied(
                f"{_label(call)}: approval {pending.id} was {final.state.value}"
                + (" (nobody answered in time)" if final.state is ApprovalState.EXPIRED else "")
            )

    async def _inject_secrets(self, call: Call) -> None:
        if call.replayed:
            return
        call.secrets = self.secrets.resolve(_tool(call).secrets)

    async def _execute(self, call: Call) -> None:
        if call.replayed:
            return
        tool = _tool(call)
        self.audit.check_writable()
        context = ToolContext(
            tool=tool.name,
            subject=call.subject,
            secrets=call.secrets,
            home=self._home,
            timeout_s=tool.timeout_s,
            output_limit=tool.output_limit,
        )
        attempts = tool.retry.attempts if tool.retry is not None and tool.idempotent else 1
        for attempt in range(1, attempts + 1):
            call.attempts = attempt
            try:
                with tracing.span("tool.execute", tool=tool.name, attempt=attempt):
                    call.result = await _run_once(tool, call.arguments, context)
                return
            except ToolFailed as exc:
                # SECURITY: only an idempotent tool is ever run twice (a write never is).
                if attempt == attempts or tool.retry is None:
                    raise
                log.info("tool.retry", tool=tool.name, attempt=attempt, error=exc.code)
                await asyncio.sleep(tool.retry.delay(attempt + 1))

    # -- finishing stages (always run) ----------------------------------------------------

    async def _filter_output(self, call: Call) -> None:
        """The tool's ``output`` mode: a secret a tool transforms (reversed, encoded, cut)
        escapes redaction, so such tools return only chosen fields, or nothing."""
        tool = call.tool
        if tool is None or tool.output_mode == "full" or call.replayed:
            return
        if isinstance(call.error, ToolFailed):
            call.error = call.error.reworded(
                f"{tool.name} failed ({call.error.code}); its output is withheld "
                f"(output.mode: {tool.output_mode})"
            )
        if tool.output_mode == "none":
            call.result = None
        elif isinstance(call.result, dict):
            call.result = {k: call.result[k] for k in tool.output_fields if k in call.result}
        else:
            call.result = None

    async def _redact(self, call: Call) -> None:
        redactor = self._redactor(call)
        if not redactor:
            return
        call.result = redactor.redact(call.result)
        if call.error is not None:
            call.error = call.error.reworded(redactor.text(call.error.message))

    async def _truncate(self, call: Call) -> None:
        if call.error is not None or call.tool is None or call.truncated:
            return
        text = canonical(call.result)
        limit = call.tool.output_limit
        if len(text) > limit:
            call.result = text[:limit] + TRUNCATION_MARKER.format(limit=limit)
            call.truncated = True
        elif isinstance(call.result, str) and call.result.endswith(
            TRUNCATION_MARKER.format(limit=limit)
        ):
            call.truncated = True

    async def _remember(self, call: Call) -> None:
        if call.owned_key is not None:
            _, future = self._remembered.get(call.owned_key, ("", None))
            if future is not None and not future.done():
                future.set_result(_result(call))
            call.owned_key = None

    async def _audit(self, call: Call) -> None:
        decision = call.decision
        redactor = self._redactor(call)
        record: dict[str, Any] = {
            "event": "tool.call",
            "sandbox": call.subject.sandbox_id,
            "subject": call.subject.as_dict(),
            "tool": call.tool.name if call.tool else redactor.text(str(call.requested)[:200]),
            "action": call.action,
            "args_digest": _digest(call.arguments if call.tool else call.raw_arguments),
            "rule": decision.rule_id if decision else DEFAULT_DENY,
            "outcome": outcome_of(call.error),
            "duration_ms": round((time.monotonic() - call.started) * 1000, 3),
        }
        if call.error is not None:
            record["error"] = {"code": call.error.code, "message": call.error.message}
        if call.approval_id is not None:
            record["approval"] = call.approval_id
        if call.replayed:
            record["replayed"] = True
        if call.attempts > 1:
            record["attempts"] = call.attempts
        await self.audit.write(record)

    # -- helpers --------------------------------------------------------------------------

    def _redactor(self, call: Call) -> Redactor:
        """The call's one redactor: every secret that resolves, read once per call (a secret
        file rotated meanwhile is read anew by the next call), shared by the approval, the
        result, the error and the audit record."""
        if call.redactor is None:
            call.redactor = Redactor(self.secrets.all_values())
        return call.redactor

    def _resolve_and_validate(self, call: Call) -> None:
        name = canonical_name(call.requested)
        tool = self.registry.get(name) if name is not None else None
        if tool is None or not self.scope.allows(call.subject.agent, tool.name):
            # Unknown and malformed names, and tools outside the agent's ``tools``, are denied
            # exactly like disallowed ones (GW-01/02); the audit names the scope.
            if tool is not None:
                call.decision = Decision(
                    "deny", AGENT_TOOLS, detail=f"not one of agent {call.subject.agent}'s tools"
                )
            raise PolicyDenied(
                f"tool {str(call.requested)[:100]!r}: no policy rule allows this call "
                "(default deny)"
            )
        hidden = self.policy.hidden_by(call.subject, tool.name)
        if hidden is not None:
            # A tool this subject can never use is denied before validation, so its schema
            # (and existence) is not revealed through validation errors (GW-01). The audit
            # names the deny rule that hides it; the caller gets the default-deny message.
            call.decision = hidden
            raise PolicyDenied(f"{tool.name}: no policy rule allows this call (default deny)")
        call.tool = tool
        call.arguments = validate_arguments(tool.name, tool.parameters, call.raw_arguments)
        if tool.action is not None:
            value = call.arguments.get(tool.action)
            call.action = None if value is None else str(value)

    def _decision(self, call: Call) -> Decision:
        tool = _tool(call)
        decision = self.policy.decide(
            call.subject, tool.name, call.action, call.arguments, datetime.now(UTC)
        )
        if (
            decision.effect == "allow"
            and tool.risk == "high"
            and not (decision.rule is not None and decision.rule.allow_high_risk)
        ):
            return Decision("ask", decision.rule_id, decision.rule)
        return decision

    def _release_key(self, call: Call) -> None:
        """A call that ended without a result (cancelled) frees its key for a retry."""
        if call.owned_key is not None:
            _, future = self._remembered.pop(call.owned_key, ("", None))
            if future is not None and not future.done():
                future.set_result(_result(call))


def outcome_of(error: SandgateError | None) -> str:
    """The audit outcome: allowed, denied, invalid, timed_out or failed."""
    if error is None:
        return "allowed"
    if isinstance(error, PolicyDenied | RateLimited | BudgetExceeded):
        return "denied"
    if isinstance(error, InvalidRequest):
        return "invalid"
    if isinstance(error, ToolTimeout):
        return "timed_out"
    return "failed"


def _result(call: Call) -> CallResult:
    if call.error is not None:
        return CallResult(
            False, code=call.error.code, message=call.error.message, status=call.error.status
        )
    return CallResult(True, result=call.result, truncated=call.truncated)


async def _run_once(tool: Tool, arguments: dict[str, Any], context: ToolContext) -> Any:
    """One attempt; raises ``ToolFailed``/``ToolTimeout`` (or another ``SandgateError``)."""
    try:
        # The executor enforces the timeout itself (killing what it started); this outer
        # bound catches an executor that does not. ``asyncio.timeout`` runs the executor in
        # this task (``wait_for`` wraps it in a task of its own: more loop turns per call).
        async with asyncio.timeout(tool.timeout_s + 5):
            return await tool.executor.run(arguments, context)
    except TimeoutError:
        raise ToolTimeout(f"{tool.name} did not finish within {tool.timeout_s:g}s") from None
    except SandgateError:
        raise
    except Exception as exc:  # a broken executor must still leave an audited failure
        log.exception("tool.executor_crashed", tool=tool.name)
        raise ToolFailed(f"{tool.name} failed unexpectedly: {type(exc).__name__}") from exc


def _tool(call: Call) -> Tool:
    if call.tool is None:
        raise PolicyDenied("no tool resolved (default deny)")
    return call.tool


def _span_ids(subject: Subject, budget: RunBudget | None) -> dict[str, Any]:
    """The ids a tool call's span carries: its sandbox, agent and run (the workflow run, or
    the agent run active in the sandbox)."""
    workflow = subject.as_dict().get("workflow") or {}
    return {
        "sandbox__id": subject.sandbox_id,
        "agent": subject.agent,
        "run__id": workflow.get("run") or (budget.run_id if budget is not None else None),
    }


def _label(call: Call) -> str:
    tool = _tool(call)
    return f"{tool.name} {call.action}" if call.action else tool.name


def _digest(value: Any) -> str:
    try:
        text = canonical(value)
    except (TypeError, ValueError):
        text = repr(value)
    return "sha256:" + hashlib.sha256(text.encode()).hexdigest()
