"""``sandgate audit``: read, query and verify the tool gateway's audit log."""

from __future__ import annotations

import json
from typing import Annotated

import typer

from sandgate.cli._common import (
    ConfigOption,
    console,
    err_console,
    friendly_errors,
    load,
    open_store,
)

audit_app = typer.Typer(help="Read, query and verify the audit log.", no_args_is_help=True)


@audit_app.command("tail")
@friendly_errors
def tail(
    count: Annotated[int, typer.Option("-n", help="How many records.")] = 20,
    config: ConfigOption = None,
) -> None:
    """Prints the last records of the log, one JSON object per line."""
    from sandgate.audit import AuditLog

    cfg = load(config)
    records = list(AuditLog(cfg.home_dir / "audit", None).records())
    for record in records[-count:]:
        print(json.dumps(record))


@audit_app.command("query")
@friendly_errors
def query(
    tool: Annotated[str | None, typer.Option(help="Only this tool.")] = None,
    outcome: Annotated[
        str | None, typer.Option(help="allowed, denied, invalid, failed or timed_out.")
    ] = None,
    sandbox: Annotated[str | None, typer.Option(help="Only this sandbox.")] = None,
    limit: Annotated[int, typer.Option(help="At most this many.")] = 1000,
    as_json: Annotated[bool, typer.Option("--json", help="One JSON object per line.")] = False,
    config: ConfigOption = None,
) -> None:
    """Queries the store's index of the log."""
    from sandgate.api.v1.gateway import audit_row

    store = open_store(load(config))
    rows = store.audit_entries(tool=tool, outcome=outcome, sandbox_id=sandbox, limit=limit)
    for row in rows:
        entry = audit_row(row)
        if as_json:
            print(json.dumps(entry))
        else:
            console.print(
                f"{entry['seq']:>6} {entry['time'][:19]} {entry['outcome']:<9} "
                f"{entry['tool'] or entry['event']} {entry['action'] or ''} "
                f"rule={entry['rule'] or '-'} sandbox={entry['sandbox']}"
            )


@audit_app.command("verify")
@friendly_errors
def verify(config: ConfigOption = None) -> None:
    """Checks the hash chain and the index; exits 1 naming the first bad record."""
    from sandgate.audit import AuditLog

    cfg = load(config)
    log = AuditLog(cfg.home_dir / "audit", open_store(cfg))
    result = log.verify()
    if not result.ok:
        err_console.print(f"[bold red]audit log damaged[/]: {result.problem}")
        raise typer.Exit(1)
    console.print(f"audit log intact: {result.checked} records checked ({log.path})")
