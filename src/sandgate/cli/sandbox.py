"""``sandgate sandbox``: inspect and manage sandboxes from the host."""

from __future__ import annotations

import asyncio
import json
import sys
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Annotated

import typer
from rich.table import Table

from sandgate.cli._common import ConfigOption, console, friendly_errors, load, open_store
from sandgate.errors import SandboxNotFound, SandboxUnavailable

if TYPE_CHECKING:
    from sandgate.guest.client import GuestClient

sandbox_app = typer.Typer(help="List, kill and run commands in sandboxes.", no_args_is_help=True)


@sandbox_app.command("list")
@friendly_errors
def list_sandboxes(
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON lines.")] = False,
    config: ConfigOption = None,
) -> None:
    """Lists the sandboxes of every team (paused to disk ones too, state ``stored``)."""
    store = open_store(load(config))
    rows = store.kept_sandboxes()
    if as_json:
        for row in rows:
            print(
                json.dumps(
                    {
                        "id": row.id,
                        "template": row.alias,
                        "team": row.team_id,
                        "state": row.state,
                        "end_at": row.end_at.isoformat(),
                        "metadata": row.metadata_,
                    }
                )
            )
        return
    table = Table("id", "template", "team", "state", "expires in", "metadata")
    now = datetime.now(UTC)
    for row in rows:
        left = max(0, int((row.end_at - now).total_seconds()))
        table.add_row(
            row.id,
            row.alias or row.template_id,
            row.team_id,
            row.state,
            f"{left}s",
            json.dumps(row.metadata_),
        )
    console.print(table)


@sandbox_app.command("kill")
@friendly_errors
def kill(sandbox_id: str, config: ConfigOption = None) -> None:
    """Kills a sandbox (any team's): removes its container, socket directory and marks it
    killed (audited, and in the sandbox's logs)."""
    from sandgate.sandboxes.wiring import open_sandbox_admin

    admin = open_sandbox_admin(load(config))
    try:
        killed = asyncio.run(admin.sandboxes.kill_any(sandbox_id))
    finally:
        admin.close()
    if not killed:
        raise SandboxNotFound(f"no live sandbox {sandbox_id} (see `sandgate sandbox list`)")
    console.print(f"killed {sandbox_id}")


@sandbox_app.command("exec", context_settings={"allow_extra_args": True})
@friendly_errors
def exec_command(
    sandbox_id: str,
    command: Annotated[list[str], typer.Argument(help="Command and arguments.")],
    user: Annotated[str, typer.Option(help="User to run as.")] = "user",
    config: ConfigOption = None,
) -> None:
    """Runs a command in a sandbox, streaming its output; exits with its exit code."""
    from sandgate.guest.client import GuestClient
    from sandgate.store import LIVE_STATES

    cfg = load(config)
    row = open_store(cfg).sandbox(sandbox_id)
    if row is None or row.state not in LIVE_STATES:
        raise SandboxNotFound(f"no live sandbox {sandbox_id} (see `sandgate sandbox list`)")
    guest = GuestClient(cfg.home_dir / "sandboxes" / sandbox_id / "guest.sock")
    code = asyncio.run(_run(guest, command, user))
    raise typer.Exit(code)


async def _run(guest: GuestClient, command: list[str], user: str) -> int:
    from sandgate.guest.client import Ended, GuestError, GuestUnavailable, Output

    try:
        stream = await guest.spawn(
            cmd=command[0],
            args=command[1:],
            envs={},
            cwd=None,
            user=user,
            tag=None,
            stdin=False,
            pty=None,
            timeout_ms=0,
        )
        async for event in stream:
            if isinstance(event, Output):
                target = sys.stderr.buffer if event.stream == "stderr" else sys.stdout.buffer
                target.write(event.data)
                target.flush()
            elif isinstance(event, Ended):
                return event.exit_code
    except GuestUnavailable:  # before GuestError, its base class
        raise SandboxUnavailable("the sandbox does not answer (is it still running?)") from None
    except GuestError as exc:
        console.print(f"[red]error[/] ({exc.connect}): {exc.message}")
        return 1
    return 1
