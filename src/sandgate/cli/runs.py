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
    limit: Annotated[int, typer.Option(help="At most this many.")] = 20,
    config: ConfigOption = None,
) -> None:
    """Lists the newest runs."""
    from sandgate.store import AgentRecords

    records = AgentRecords(open_store(load(config)))
    for run in records.runs(limit=limit):
        console.print(
            f"{run.id}  {run.created_at.isoformat()[:19]}  {run.agent_id:<16} {run.state:<9} "
            f"{run.stop_reason or '-':<15} steps={run.steps} tools={run.tool_calls}"
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
