"""``sandgate workflows``: list, run, show, cancel and retry workflows on the running server
(through its HTTP API, with the default key)."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Annotated, Any

import typer

from sandgate.cli._common import ConfigOption, console, friendly_errors, load
from sandgate.errors import InvalidRequest

if TYPE_CHECKING:
    from sandgate.cli._client import ServerClient

workflows_app = typer.Typer(
    help="Durable workflows: list, run, show, cancel, retry.", no_args_is_help=True
)

_STYLE = {
    "completed": "green",
    "skipped": "dim",
    "running": "cyan",
    "waiting": "magenta",
    "pending": "dim",
    "failed": "red",
    "interrupted": "bold red",
    "cancelled": "yellow",
    "timed_out": "yellow",
    "queued": "dim",
}
_FINAL = ("run.completed", "run.failed", "run.interrupted", "run.timed_out", "run.cancelled")


def _client(config: Any) -> ServerClient:
    from sandgate.cli._client import ServerClient

    return ServerClient(load(config))


@workflows_app.command("list")
@friendly_errors
def list_workflows(
    as_json: Annotated[bool, typer.Option("--json", help="One JSON object per line.")] = False,
    config: ConfigOption = None,
) -> None:
    """Lists the workflows this key may run."""
    found = _client(config).request("GET", "/v1/workflows")["workflows"]
    for workflow in found:
        if as_json:
            print(json.dumps(workflow))
            continue
        steps = ", ".join(f"{s['id']}:{s['kind']}" for s in workflow["steps"])
        schedule = f" schedule='{workflow['schedule']}'" if workflow["schedule"] else ""
        console.print(f"[bold]{workflow['name']}[/] ({workflow['source']}){schedule}  {steps}")


@workflows_app.command("runs")
@friendly_errors
def list_runs(
    workflow: Annotated[str | None, typer.Option(help="Only runs of this workflow.")] = None,
    limit: Annotated[int, typer.Option(help="At most this many.")] = 20,
    config: ConfigOption = None,
) -> None:
    """Lists the newest runs."""
    params: dict[str, Any] = {"limit": limit}
    if workflow:
        params["workflow"] = workflow
    for run in _client(config).request("GET", "/v1/workflow-runs", params=params)["runs"]:
        style = _STYLE.get(run["state"], "")
        console.print(
            f"{run['id']}  {run['created_at'][:19]}  {run['workflow']:<20} "
            f"[{style}]{run['state']:<11}[/] attempt={run['attempt']} {run['error'] or ''}"
        )


@workflows_app.command("run")
@friendly_errors
def run(
    name: Annotated[str, typer.Argument(help="The workflow.")],
    inputs: Annotated[
        list[str] | None,
        typer.Option("--input", "-i", help="An input as KEY=VALUE (VALUE as JSON if it is)."),
    ] = None,
    wait: Annotated[bool, typer.Option("--wait", help="Follow the run until it ends.")] = False,
    config: ConfigOption = None,
) -> None:
    """Starts a run of NAME; --wait follows its steps and shows the result."""
    client = _client(config)
    body = {"inputs": parse_inputs(inputs or [])}
    started = client.request("POST", f"/v1/workflows/{name}/runs", json=body)
    console.print(f"run [bold]{started['id']}[/] of {name} started")
    if not wait:
        return
    kind = ""
    for line in client.stream(f"/v1/workflow-runs/{started['id']}/events"):
        if line.startswith("event: "):
            kind = line[7:]
        if not line.startswith("data: "):
            continue
        event = json.loads(line[6:])
        step, state = event.get("step"), event.get("state")
        if step and state:
            style = _STYLE.get(state, "")
            detail = event.get("summary") or event.get("error") or ""
            console.print(f"  {step:<20} [{style}]{state}[/] {detail}", highlight=False)
        if kind in _FINAL:
            break
    final = client.request("GET", f"/v1/workflow-runs/{started['id']}")
    _show(final)
    if final["state"] != "completed":
        raise typer.Exit(1)


@workflows_app.command("show")
@friendly_errors
def show(
    run_id: Annotated[str, typer.Argument(help="A run id (wfr_...).")],
    as_json: Annotated[bool, typer.Option("--json", help="The run as JSON.")] = False,
    config: ConfigOption = None,
) -> None:
    """Shows a run's DAG: each step's state, time and output summary (or error)."""
    data = _client(config).request("GET", f"/v1/workflow-runs/{run_id}")
    if as_json:
        print(json.dumps(data, indent=2))
        return
    _show(data)


@workflows_app.command("cancel")
@friendly_errors
def cancel(run_id: str, config: ConfigOption = None) -> None:
    """Cancels a run that has not ended."""
    data = _client(config).request("POST", f"/v1/workflow-runs/{run_id}/cancel")
    console.print(f"{data['id']} {data['state']}")


@workflows_app.command("retry")
@friendly_errors
def retry(run_id: str, config: ConfigOption = None) -> None:
    """Runs a failed, interrupted, timed-out or cancelled run again from where it stopped
    (completed steps are kept, not run again)."""
    data = _client(config).request("POST", f"/v1/workflow-runs/{run_id}/retry")
    console.print(f"{data['id']} {data['state']} (attempt {data['attempt']})")


def parse_inputs(pairs: list[str]) -> dict[str, Any]:
    """``KEY=VALUE`` pairs: VALUE as JSON when it parses (``3``, ``true``, ``[1,2]``), else
    as text. Raises ``InvalidRequest`` for a pair without ``=`` or a key given twice."""
    inputs: dict[str, Any] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise InvalidRequest(f"--input {pair!r}: write KEY=VALUE")
        if key in inputs:
            raise InvalidRequest(f"--input {key} is given twice")
        try:
            inputs[key] = json.loads(value)
        except ValueError:
            inputs[key] = value
    return inputs


def _show(run: dict[str, Any]) -> None:
    style = _STYLE.get(run["state"], "")
    console.print(
        f"[bold]{run['id']}[/] {run['workflow']} [{style}]{run['state']}[/] "
        f"attempt={run['attempt']} tool_calls={run['usage']['tool_calls']} "
        f"tokens={run['usage']['tokens']}"
    )
    depth: dict[str, int] = {}
    for step in run.get("steps", []):
        depth[step["id"]] = 1 + max((depth.get(d, 0) for d in step["depends_on"]), default=-1)
        line_style = _STYLE.get(step["state"], "")
        took = f"{step['duration_ms'] / 1000:.2f}s" if step["duration_ms"] is not None else "-"
        after = f" ← {', '.join(step['depends_on'])}" if step["depends_on"] else ""
        items = step.get("items")
        count = f" [{items['done']}/{items['total']}]" if items else ""
        what = step["error"] if step["error"] else (step["summary"] or "")
        console.print(
            f"{'  ' * depth[step['id']]}[{line_style}]{step['state']:<11}[/] "
            f"[bold]{step['id']}[/] ({step['kind']}){count}{after}  {took}  {what}",
            highlight=False,
        )
    if run.get("error"):
        console.print(f"[red]{run['error_code']}[/]: {run['error']}")
    elif run["state"] == "completed":
        console.print(f"output: {json.dumps(run['output'])[:2000]}", highlight=False)
