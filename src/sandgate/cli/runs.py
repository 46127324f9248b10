"""``sandgate runs``: list agent runs and show one's trace (read from the store)."""

from __future__ import annotations

import json
from typing import Annotated

import typer

from sandgate.cli._common import ConfigOption, console, friendly_errors, load, open_store
from sandgate.cli._render import render_event
from sandgate.errors import NotFound

runs_app = typer.Typer(help="Agent runs and their traces.", no_args_is_help=True)


@runs_app.command("list")
@friendly_errors
def list_runs(
    agent: Annotated[str | None, typer.Option(help="Only this agent's runs.")] = None,
    status: Annotated[
        list[str] | None,
        typer.Option(
            help="Only runs in this state (repeatable): queued, running, completed, "
            "stopped, failed, cancelled."
        ),
    ] = None,
    since: Annotated[
        str | None, typer.Option(help="Created at or after this ISO 8601 time.")
    ] = None,
    until: Annotated[str | None, typer.Option(help="Created before this ISO 8601 time.")] = None,
    limit: Annotated[int, typer.Option(help="At most this many.")] = 20,
    as_json: Annotated[bool, typer.Option("--json", help="One JSON object per line.")] = False,
    config: ConfigOption = None,
) -> None:
    """Lists runs of every team, newest first."""
    from sandgate.api.v1.agents import parse_run_state, parse_time, run_json
    from sandgate.store import AgentRecords

    records = AgentRecords(open_store(load(config)))
    runs = records.runs(
        agent_id=agent,
        states=[parse_run_state(value) for value in status or []],
        since=parse_time("--since", since),
        until=parse_time("--until", until),
        limit=limit,
    )
    for run in runs:
        if as_json:
            print(json.dumps({**run_json(run), "team": run.team_id}))
            continue
        console.print(
            f"{run.id}  {run.created_at.isoformat()[:19]}  {run.agent_id:<16} {run.state:<9} "
            f"{run.stop_reason or '-':<15} steps={run.steps} tools={run.tool_calls}"
        )


@runs_app.command("cancel")
@friendly_errors
def cancel(
    run_id: Annotated[str, typer.Argument(help="A run id (run_...).")],
    wait: Annotated[float, typer.Option(help="Seconds to wait for it to stop.")] = 30.0,
    config: ConfigOption = None,
) -> None:
    """Cancels an active run, whichever process (server, chat) runs it: its code is
    interrupted and an ephemeral session's sandbox released. Exits 1 if it is already final."""
    import getpass
    import time
    from datetime import UTC, datetime

    from sandgate.errors import Conflict
    from sandgate.store import ACTIVE_RUN_STATES, AgentRecords

    records = AgentRecords(open_store(load(config)))
    run = records.run(run_id)
    if run is None:
        raise NotFound(f"run '{run_id}' not found (see `sandgate runs list`)")
    if run.state not in ACTIVE_RUN_STATES:
        raise Conflict(f"cannot cancel run {run_id}: it is {run.state}")
    records.request_cancel(run_id, by=f"cli:{getpass.getuser()}", at=datetime.now(UTC))
    deadline = time.monotonic() + wait
    while time.monotonic() < deadline:
        run = records.run(run_id)
        if run is not None and run.state not in ACTIVE_RUN_STATES:
            console.print(f"{run_id} {run.state}: {run.error or run.stop_reason}")
            return
        time.sleep(0.1)
    console.print(
        f"cancel of {run_id} requested; the process running it (is it still up?) stops it "
        "when it next looks"
    )


@runs_app.command("show")
@friendly_errors
def show(
    run_id: Annotated[str, typer.Argument(help="A run id (run_...).")],
    as_json: Annotated[bool, typer.Option("--json", help="One JSON event per line.")] = False,
    config: ConfigOption = None,
) -> None:
    """Shows a run's trace: each model request and response, code run, tool call (with its
    audit id), tokens and timings."""
    from sandgate.store import AgentRecords

    records = AgentRecords(open_store(load(config)))
    run = records.run(run_id)
    if run is None:
        raise NotFound(f"run '{run_id}' not found (see `sandgate runs list`)")
    events = records.events(run_id)
    if as_json:
        for event in events:
            print(json.dumps({"seq": event.seq, "type": event.type, "data": event.data}))
        return
    for event in events:
        render_event(console, event.type, event.data, trace=True)
    console.print(
        f"[bold]{run.state}[/] stop={run.stop_reason} steps={run.steps} "
        f"model_calls={run.model_calls} tokens={run.prompt_tokens}+{run.completion_tokens} "
        f"tool_calls={run.tool_calls}"
    )
