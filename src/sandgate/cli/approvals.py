"""``sandgate approvals``: see and decide tool calls waiting for a person."""

from __future__ import annotations

import getpass
import json
from typing import TYPE_CHECKING, Annotated

import typer

from sandgate.cli._common import ConfigOption, console, friendly_errors, load

if TYPE_CHECKING:
    from sandgate.approvals import ApprovalService
    from sandgate.config import Config

approvals_app = typer.Typer(help="List, approve and deny pending tool calls.", no_args_is_help=True)


def _service(cfg: Config) -> ApprovalService:
    """With the configured webhook: a decision made here is announced like the server's."""
    from sandgate.approvals import build_approvals
    from sandgate.secrets import SecretStore

    return build_approvals(cfg, SecretStore(cfg.secrets))


@approvals_app.command("list")
@friendly_errors
def list_approvals(
    every: Annotated[bool, typer.Option("--all", help="Decided ones too.")] = False,
    as_json: Annotated[bool, typer.Option("--json", help="One JSON object per line.")] = False,
    config: ConfigOption = None,
) -> None:
    """Lists pending approvals (oldest first)."""
    from sandgate.approvals import ApprovalState

    found = _service(load(config)).list_approvals(None if every else ApprovalState.PENDING)
    for approval in found:
        if as_json:
            print(json.dumps(approval.as_dict()))
        else:
            console.print(
                f"{approval.id} {approval.state.value:<8} {approval.tool} {approval.action or ''} "
                f"sandbox={approval.sandbox_id} agent={approval.subject.get('agent')} "
                f"args={json.dumps(approval.arguments)} expires={approval.expires_at[:19]}"
            )


@approvals_app.command("approve")
@friendly_errors
def approve(approval_id: str, config: ConfigOption = None) -> None:
    """Lets a pending call run."""
    service = _service(load(config))
    try:
        decided = service.decide(approval_id, approve=True, by=_who())
    finally:
        service.close()
    console.print(f"{decided.id} approved")


@approvals_app.command("deny")
@friendly_errors
def deny(approval_id: str, config: ConfigOption = None) -> None:
    """Refuses a pending call."""
    service = _service(load(config))
    try:
        decided = service.decide(approval_id, approve=False, by=_who())
    finally:
        service.close()
    console.print(f"{decided.id} denied")


def _who() -> str:
    return f"cli:{getpass.getuser()}"
