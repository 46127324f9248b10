"""``sandgate mcp``: an MCP server on stdio for MCP hosts (Claude Desktop, Cursor, …)."""

from __future__ import annotations

import asyncio
import secrets
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Annotated

import typer

from sandgate.cli._common import ConfigOption, friendly_errors, load

if TYPE_CHECKING:
    from sandgate.api.app import Application


@friendly_errors
def mcp(
    agent: Annotated[
        str | None, typer.Option(help="Act as this agent (its tools and policy).")
    ] = None,
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
    asyncio.run(_serve(application, agent))


async def _serve(application: Application, agent: str | None) -> None:
    from mcp.server.stdio import stdio_server

    from sandgate.access import Principal
    from sandgate.api.mcp import McpCaller, build_mcp_server

    await application.gateway.registry.load_mcp(application.gateway.secrets)
    team = application.store.get_or_create_team(
        "local", "team_" + secrets.token_hex(8), datetime.now(UTC)
    )
    caller = McpCaller(Principal(team_id=team.id, api_key_id="mcp"), agent)
    server = build_mcp_server(application.sandboxes, application.gateway, lambda _: caller)
    created: list[str] = []
    try:
        async with stdio_server() as (read, write):
            await server.run(read, write, server.create_initialization_options())
    finally:
        for row in application.store.live_sandboxes():
            if row.api_key_id == "mcp" and row.team_id == team.id:
                created.append(row.id)
        for sandbox_id in created:
            await application.sandboxes.kill_any(sandbox_id)
        await application.gateway.registry.close()
        await asyncio.to_thread(application.gateway.audit.close)  # every record written first
        application.store.close()
