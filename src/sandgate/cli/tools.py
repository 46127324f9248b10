"""``sandgate tools``: the tools the configuration declares."""

from __future__ import annotations

import asyncio
import json
from typing import Annotated

import typer

from sandgate.cli._common import ConfigOption, console, friendly_errors, load

tools_app = typer.Typer(help="Inspect the gateway's tools.", no_args_is_help=True)


@tools_app.command("list")
@friendly_errors
def list_tools(
    as_json: Annotated[bool, typer.Option("--json", help="Full schemas, one per line.")] = False,
    config: ConfigOption = None,
) -> None:
    """Lists every tool (MCP servers are asked for theirs)."""
    cfg = load(config)
    from sandgate.secrets import SecretStore
    from sandgate.tools import ToolRegistry

    registry = ToolRegistry(cfg.tools, cfg.home_dir)

    async def listed() -> None:
        try:
            await registry.load_mcp(SecretStore(cfg.secrets))
        finally:
            await registry.close()

    asyncio.run(listed())
    for tool in registry.all():
        if as_json:
            print(json.dumps(tool.describe()))
        else:
            actions = f" [{'|'.join(tool.actions)}]" if tool.actions else ""
            console.print(
                f"{tool.name}{actions} ({tool.kind}, risk {tool.risk}): {tool.description}"
            )
