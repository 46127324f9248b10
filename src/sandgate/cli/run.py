"""``sandgate run``: run one script in a fresh sandbox as an agent, then summarise its tool
calls. Builds the services in-process (``sandgate.wiring``, without the HTTP app; no server
needed; if one runs on the same home, the audit log and the store are shared safely)."""

from __future__ import annotations

import asyncio
import sys
from collections import Counter
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from sandgate.cli._common import (
    DEFAULT_TEAM,
    ConfigOption,
    TeamOption,
    err_console,
    friendly_errors,
    load,
    local_principal,
)
from sandgate.errors import InvalidRequest, SandboxUnavailable

if TYPE_CHECKING:
    from sandgate.wiring import Services

_INTERPRETERS = {".py": ["python3", "-u"], ".js": ["node"], ".sh": ["bash"]}


@friendly_errors
def run(
    script: Annotated[Path, typer.Argument(help="A .py, .js or .sh file.", exists=True)],
    agent: Annotated[str, typer.Option(help="The agent (from agents:) the sandbox acts as.")],
    template: Annotated[str, typer.Option(help="Sandbox template.")] = "base",
    timeout: Annotated[int, typer.Option(help="Seconds the script may run.")] = 600,
    team: TeamOption = DEFAULT_TEAM,
    config: ConfigOption = None,
) -> None:
    """Runs SCRIPT in a fresh sandbox as AGENT, streams its output, and prints a summary of the
    tool calls it made. Exits with the script's exit code. The sandbox belongs to TEAM, so the
    team's API keys can decide its approvals over HTTP too."""
    from sandgate.cli._bootstrap import ensure_shipped_templates
    from sandgate.wiring import open_services

    interpreter = _INTERPRETERS.get(script.suffix)
    if interpreter is None:
        raise InvalidRequest(f"cannot run {script.name}: use a .py, .js or .sh file")
    cfg = load(config)
    services = open_services(cfg)
    ensure_shipped_templates(cfg, services.store, build=False)
    source = script.read_bytes()
    code = asyncio.run(
        _run(services, script.name, source, interpreter, agent, template, timeout, team)
    )
    raise typer.Exit(code)


async def _run(
    services: Services,
    name: str,
    source: bytes,
    interpreter: list[str],
    agent: str,
    template: str,
    limit_s: int,
    team: str,
) -> int:
    from sandgate.guest.client import Ended, GuestError, Output
    from sandgate.sandboxes import CreateRequest
    from sandgate.tools import AGENT_METADATA_KEY

    store, sandboxes = services.store, services.sandboxes
    await services.gateway.registry.load_mcp(services.gateway.secrets)
    principal = local_principal(store, team, "cli")
    sandbox = await sandboxes.create(
        principal,
        CreateRequest(
            template=template,
            timeout_s=limit_s + 60,
            metadata={AGENT_METADATA_KEY: agent},
            envs={},
        ),
    )
    err_console.print(f"[dim]sandbox {sandbox.id} as agent {agent}[/]")
    try:
        route = sandboxes.route(sandbox.id)
        if route is None:
            raise SandboxUnavailable(f"sandbox {sandbox.id} is not running")
        target = f"/home/user/{name}"
        await route.guest.write_file(target, source, user="user")
        stream = await route.guest.spawn(
            cmd=interpreter[0],
            args=[*interpreter[1:], target],
            envs={},
            cwd="/home/user",
            user="user",
            tag=None,
            stdin=False,
            pty=None,
            timeout_ms=limit_s * 1000,
        )
        exit_code = 1
        async for event in stream:
            if isinstance(event, Output):
                out = sys.stderr.buffer if event.stream == "stderr" else sys.stdout.buffer
                out.write(event.data)
                out.flush()
            elif isinstance(event, Ended):
                exit_code = event.exit_code
    except GuestError as exc:
        raise SandboxUnavailable(f"running the script failed: {exc.message}") from None
    finally:
        await sandboxes.kill_any(sandbox.id)
    _summary(services, sandbox.id)
    await services.close()  # every audit record written first
    return exit_code


def _summary(services: Services, sandbox_id: str) -> None:
    rows = services.store.audit_entries(sandbox_id=sandbox_id, limit=100_000)
    calls = Counter(
        (row.tool, row.action or "", row.outcome) for row in rows if row.event == "tool.call"
    )
    total = sum(calls.values())
    err_console.print(f"\n[bold]tool calls: {total}[/]")
    for (tool, action, outcome), count in sorted(calls.items()):
        err_console.print(f"  {count:>5}  {tool} {action}".rstrip() + f"  {outcome}")
