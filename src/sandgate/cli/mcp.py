"""``sandgate mcp``: an MCP server on stdio for MCP hosts (Claude Desktop, Cursor, …)."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Annotated

import typer

from sandgate.cli._common import (
    DEFAULT_TEAM,
    ConfigOption,
    TeamOption,
    friendly_errors,
    load,
    local_principal,
)

if TYPE_CHECKING:
    from sandgate.api.app import Application


@friendly_errors
def mcp(
    agent: Annotated[
        str | None, typer.Option(help="Act as this agent (its tools and policy).")
    ] = None,
    team: TeamOption = DEFAULT_TEAM,
    config: ConfigOption = None,
) -> None:
    """Serves sandboxes and the allowed tools over MCP on stdin/stdout. Add it to an MCP
    host as the command `sandgate mcp --agent ID`."""
    from sandgate.api.app import create_app
    from sandgate.cli._bootstrap import ensure_shipped_templates
    from sandgate.logs import configure_logging

    cfg = load(config)
    configure_logging("warning")  # stdout carries the protocol; logs go to stderr
    application = create_app(cfg)
    ensure_shipped_templates(cfg, application.store, build=False)
    asyncio.run(_serve(application, agent, team))


async def _serve(application: Application, agent: str | None, team: str) -> None:
    from mcp.server.stdio import stdio_server

    from sandgate.api.mcp import McpCaller, build_mcp_server

    await application.gateway.registry.load_mcp(application.gateway.secrets)
    principal = local_principal(application.store, team, "mcp")
    caller = McpCaller(principal, agent)
    server = build_mcp_server(application.sandboxes, application.gateway, lambda _: caller)
    created: list[str] = []
    try:
        async with stdio_server() as (read, write):
            await server.run(read, write, server.create_initialization_options())
    finally:
        for row in application.store.live_sandboxes():
            if row.api_key_id == "mcp" and row.team_id == principal.team_id:
                created.append(row.id)
        for sandbox_id in created:
            await application.sandboxes.kill_any(sandbox_id)
        await application.gateway.registry.close()
        await asyncio.to_thread(application.gateway.approvals.close)
        await asyncio.to_thread(application.gateway.audit.close)  # every record written first
        application.store.close()
