"""``sandgate chat``: talk to an agent in the terminal; approvals are asked inline.

Runs the agent in-process, like ``sandgate run`` (``sandgate.wiring``, without the HTTP app;
no server needed; a server on the same home shares the store and audit log safely). The
session is kept in the store: ``--session`` continues it later, here or over the HTTP API.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Annotated

import typer
from rich.markdown import Markdown

from sandgate.cli._common import (
    DEFAULT_TEAM,
    ConfigOption,
    TeamOption,
    console,
    friendly_errors,
    load,
    local_principal,
)
from sandgate.cli._render import render_event

if TYPE_CHECKING:
    from sandgate.access import Principal
    from sandgate.agents import AgentRunner
    from sandgate.wiring import Services

_QUIT = {"/exit", "/quit", "exit", "quit"}


@friendly_errors
def chat(
    agent: Annotated[str, typer.Option(help="The agent (from agents:) to talk to.")],
    session: Annotated[str | None, typer.Option(help="Continue this session.")] = None,
    team: TeamOption = DEFAULT_TEAM,
    config: ConfigOption = None,
) -> None:
    """Chats with AGENT: each message is a run; code, tool calls and approvals are shown as
    they happen. /exit (or Ctrl-D) leaves; the session can be continued with --session."""
    from sandgate.cli._bootstrap import ensure_shipped_templates
    from sandgate.logs import configure_logging
    from sandgate.wiring import open_services

    cfg = load(config)
    configure_logging("warning")  # the conversation owns the terminal
    services = open_services(cfg)
    ensure_shipped_templates(cfg, services.store, build=False)
    asyncio.run(_chat(services, agent, session, team))


async def _chat(services: Services, agent_id: str, session_id: str | None, team: str) -> None:
    runner = services.agents
    await services.gateway.registry.load_mcp(services.gateway.secrets)
    principal = local_principal(services.store, team, "cli")
    agent = runner.agent(agent_id)
    if session_id is None:
        # A session of its own: the sandbox (and its Python variables) lasts the conversation.
        session_id = runner.open_session(principal, agent_id).id
    console.print(
        f"[bold]{agent.name or agent.id}[/] ({agent.mode} mode, "
        f"{', '.join(f'{m.provider}/{m.model}' for m in agent.models)}). /exit to leave."
    )
    try:
        while True:
            try:
                message = (await asyncio.to_thread(console.input, "[bold cyan]you>[/] ")).strip()
            except EOFError:
                break
            if message in _QUIT:
                break
            if not message:
                continue
            session_id = await _one_run(runner, principal, agent_id, message, session_id)
    finally:
        if session_id is not None:
            console.print(f"[dim]session {session_id}: continue with --session {session_id}[/]")
            row = runner.session(principal, session_id)
            if row.sandbox_id:
                await services.sandboxes.kill_any(row.sandbox_id)
        await runner.stop()
        await services.close()  # every audit record written first


async def _one_run(
    runner: AgentRunner, principal: Principal, agent_id: str, message: str, session_id: str | None
) -> str:
    run = await runner.submit(principal, agent_id, message, session_id)
    async for event in runner.events(run.id):
        render_event(console, event.type, event.data, trace=False)
        if event.type == "approval.required":
            answer = await asyncio.to_thread(
                console.input, "[bold magenta]approve this call? \\[y/N][/] "
            )
            approve = answer.strip().lower() in {"y", "yes"}
            runner.decide(principal, event.data["approval"], approve=approve)
            console.print("[green]approved[/]" if approve else "[red]denied[/]")
        elif event.type == "run.completed":
            console.print(Markdown(event.data.get("answer") or ""))
    return run.session_id
