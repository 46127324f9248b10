"""``/v1`` routes of the tool gateway: tools, policy (show, dry-run), approvals, audit.

Authenticated with the same API keys as the E2B control plane (``X-API-Key``); a team sees
and decides only approvals of its own sandboxes (and of ``sandgate run``/``chat`` runs made
as the team) and reads only its own audit entries. The approvals routes also accept a key
scoped to ``approvals`` (an approver service's); every other route refuses it (403).
"""

from typing import Annotated, Any, Literal

from fastapi import APIRouter, Query
from pydantic import BaseModel, ConfigDict, Field

from sandgate.access import Principal
from sandgate.api.auth import ApproverCaller, Caller
from sandgate.api.strict import QueryInt
from sandgate.approvals import ApprovalState
from sandgate.errors import NotFound
from sandgate.policy import Subject
from sandgate.store import Store
from sandgate.tools import Gateway

__all__ = ["build_v1_router"]


StateName = Literal["pending", "approved", "denied", "expired"]


class DryRun(BaseModel):
    """Strict: ``arguments`` reach the policy exactly as sent (no coercion, GW-07)."""

    model_config = ConfigDict(extra="forbid", strict=True)

    tool: str
    arguments: dict[str, Any] = Field(default_factory=dict)
    agent: str | None = None
    metadata: dict[str, str] = Field(default_factory=dict)


def build_v1_router(gateway: Gateway, store: Store) -> APIRouter:
    router = APIRouter(prefix="/v1")

    def own_approval(caller: Principal, approval_id: str) -> None:
        approval = gateway.approvals.get(approval_id)
        if approval.subject.get("team") != caller.team_id:
            raise NotFound(f"approval '{approval_id}' not found")

    @router.get("/tools")
    def list_tools(caller: Caller) -> dict[str, Any]:
        return {"tools": [tool.describe() for tool in gateway.registry.all()]}

    @router.get("/policy")
    def show_policy(caller: Caller) -> dict[str, Any]:
        return {
            "rules": [rule.model_dump(mode="json") for rule in gateway.policy.rules],
            "default": "deny",
        }

    @router.post("/policy/dry-run")
    def dry_run(caller: Caller, body: DryRun) -> dict[str, Any]:
        metadata = dict(body.metadata)
        subject = Subject(
            sandbox_id="dry-run",
            team_id=caller.team_id,
            api_key_id=caller.api_key_id,
            agent=body.agent,
            metadata=metadata,
        )
        return gateway.dry_run(subject, body.tool, body.arguments)

    @router.get("/approvals")
    def list_approvals(
        caller: ApproverCaller,
        state: Annotated[StateName | None, Query()] = None,
    ) -> dict[str, Any]:
        wanted = ApprovalState(state) if state else None
        return {
            "approvals": [
                a.as_dict()
                for a in gateway.approvals.list_approvals(wanted)
                if a.subject.get("team") == caller.team_id
            ]
        }

    @router.get("/approvals/{approval_id}")
    def get_approval(caller: ApproverCaller, approval_id: str) -> dict[str, Any]:
        own_approval(caller, approval_id)
        return gateway.approvals.get(approval_id).as_dict()

    @router.post("/approvals/{approval_id}/approve")
    def approve(caller: ApproverCaller, approval_id: str) -> dict[str, Any]:
        own_approval(caller, approval_id)
        decided = gateway.approvals.decide(approval_id, approve=True, by=caller.api_key_id)
        return decided.as_dict()

    @router.post("/approvals/{approval_id}/deny")
    def deny(caller: ApproverCaller, approval_id: str) -> dict[str, Any]:
        own_approval(caller, approval_id)
        decided = gateway.approvals.decide(approval_id, approve=False, by=caller.api_key_id)
        return decided.as_dict()

    @router.get("/audit")
    def audit(
        caller: Caller,
        tool: str | None = None,
        outcome: str | None = None,
        sandbox: str | None = None,
        after: Annotated[QueryInt, Query(ge=0)] = 0,
        limit: Annotated[QueryInt, Query(ge=1, le=1000)] = 100,
    ) -> dict[str, Any]:
        rows = store.audit_entries(
            tool=tool,
            outcome=outcome,
            sandbox_id=sandbox,
            team_id=caller.team_id,
            after_seq=after,
            limit=limit,
        )
        return {"entries": [audit_row(row) for row in rows]}

    return router


def audit_row(row: Any) -> dict[str, Any]:
    """One index row as JSON (also printed by ``sandgate audit query --json``)."""
    return {
        "seq": row.seq,
        "time": row.time.isoformat(),
        "event": row.event,
        "sandbox": row.sandbox_id,
        "team": row.team_id,
        "agent": row.agent,
        "tool": row.tool,
        "action": row.action,
        "outcome": row.outcome,
        "rule": row.rule_id,
        "duration_ms": row.duration_ms,
        "hash": row.hash,
    }
