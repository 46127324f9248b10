"""The runner's only coupling to the tool gateway (``sandgate.tools``), kept in one place.

It answers: which tools may this agent's sandbox see (for the prompt), which tool calls did a
sandbox make since a point in the audit log (for the trace, SSE and budgets), which approvals
wait for a person, and, in classic mode, makes one call through the gateway's pipeline as the
sandbox would. Code-mode calls never pass through here: the sandbox makes them over its own
socket, so the same policy, approvals and audit apply whoever drives the sandbox.
"""

from __future__ import annotations

from typing import Any

from sandgate.agents.steps import ToolStep
from sandgate.approvals import Approval, ApprovalState
from sandgate.config import AgentConfig
from sandgate.policy import Subject
from sandgate.store import Sandbox, Store
from sandgate.tools import CallResult, Gateway, Tool, ToolGatewayHook

__all__ = ["GatewayAdapter"]


class GatewayAdapter:
    def __init__(self, gateway: Gateway, hook: ToolGatewayHook, store: Store) -> None:
        self._gateway = gateway
        self._hook = hook
        self._store = store

    @property
    def gateway(self) -> Gateway:
        return self._gateway

    def subject(self, sandbox: Sandbox) -> Subject:
        """Who the sandbox's calls are made as (exactly what its socket uses)."""
        return self._hook.subject(sandbox)

    def tools_for(self, agent: AgentConfig, sandbox: Sandbox) -> list[Tool]:
        """Tools of the agent's ``tools`` the policy could allow this sandbox (the gateway
        enforces the same scope on every call)."""
        return self._gateway.visible_tools(self.subject(sandbox))

    def audit_position(self) -> int:
        last = self._store.last_audit_entry()
        return last.seq if last is not None else 0

    def tool_calls(self, sandbox_id: str, after_seq: int, step: int) -> list[ToolStep]:
        """Tool calls the sandbox made after audit record ``after_seq``, oldest first."""
        rows = self._store.audit_entries(sandbox_id=sandbox_id, after_seq=after_seq, limit=10_000)
        return [
            ToolStep(
                number=step,
                tool=row.tool or "",
                action=row.action,
                outcome=row.outcome,
                rule=row.rule_id,
                audit_seq=row.seq,
                duration_ms=row.duration_ms,
            )
            for row in rows
            if row.event == "tool.call"
        ]

    def pending_approvals(self, sandbox_id: str) -> list[Approval]:
        return [
            a
            for a in self._gateway.approvals.list_approvals(ApprovalState.PENDING)
            if a.sandbox_id == sandbox_id
        ]

    def decide(self, approval_id: str, *, approve: bool, by: str) -> Approval:
        return self._gateway.approvals.decide(approval_id, approve=approve, by=by)

    async def call(self, sandbox: Sandbox, tool: str, arguments: dict[str, Any]) -> CallResult:
        """One call through the whole pipeline, as ``sandbox`` (classic mode)."""
        return await self._gateway.call(self.subject(sandbox), tool, arguments)
