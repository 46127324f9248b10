"""``sandgate mcp``: an MCP server on stdio for MCP hosts (Claude Desktop, Cursor, …). Builds
the services in-process (``sandgate.wiring``), without the HTTP app."""

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
    from sandgate.wiring import Services


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
    from sandgate.cli._bootstrap import ensure_shipped_templates
    from sandgate.logs import configure_logging
    from sandgate.wiring import open_services

    cfg = load(config)
    configure_logging("warning")  # stdout carries the protocol; logs go to stderr
    services = open_services(cfg)
    ensure_shipped_templates(cfg, services.store, build=False)
    asyncio.run(_serve(services, agent, team))


async def _serve(services: Services, agent: str | None, team: str) -> None:
    from mcp.server.stdio import stdio_server

    from sandgate.api.mcp import McpCaller, build_mcp_server

    await services.gateway.registry.load_mcp(services.gateway.secrets)
    principal = local_principal(services.store, team, "mcp")
    caller = McpCaller(principal, agent)
    server = build_mcp_server(services.sandboxes, services.gateway, lambda _: caller)
    created: list[str] = []
    try:
        async with stdio_server() as (read, write):
            await server.run(read, write, server.create_initialization_options())
    finally:
        for row in services.store.live_sandboxes():
            if row.api_key_id == "mcp" and row.team_id == principal.team_id:
                created.append(row.id)
        for sandbox_id in created:
            await services.sandboxes.kill_any(sandbox_id)
        await services.close()  # every audit record written first
