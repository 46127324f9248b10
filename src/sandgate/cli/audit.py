"""``sandgate audit``: read, query and verify the tool gateway's audit log."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Annotated

import typer

from sandgate.cli._common import (
    ConfigOption,
    console,
    err_console,
    friendly_errors,
    load,
    open_store,
)

if TYPE_CHECKING:
    from sandgate.audit import AuditLog

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
def verify(
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON object.")] = False,
    config: ConfigOption = None,
) -> None:
    """Checks the hash chain, every record against the store's anchored copy and the signed
    checkpoints; exits 1 naming the first bad record."""
    log = _open(config)
    result = log.verify()
    if as_json:
        print(
            json.dumps(
                {
                    "ok": result.ok,
                    "checked": result.checked,
                    "problem": result.problem,
                    "first_bad_record": result.first_bad,
                    "line": result.bad_line,
                    "notes": list(result.notes),
                }
            )
        )
    elif not result.ok:
        where = f" (first bad record: {result.first_bad})" if result.first_bad else ""
        err_console.print(f"[bold red]audit log damaged[/]: {result.problem}{where}")
        err_console.print(
            "Tool calls are refused while it is. Keep a copy for investigation, then start a "
            "new log with `sandgate audit recover` (the damaged file is kept beside it)."
        )
    else:
        console.print(f"audit log intact: {result.checked} records checked ({log.path})")
    if not as_json:
        for note in result.notes:
            console.print(f"  note: {note}")
    if not result.ok:
        raise typer.Exit(1)


@audit_app.command("recover")
@friendly_errors
def recover(
    yes: Annotated[
        bool, typer.Option("--yes", help="Confirm: start a new log after the damaged one.")
    ] = False,
    config: ConfigOption = None,
) -> None:
    """Starts a new log after damage that `verify` reported: the damaged file is kept as
    audit.jsonl.damaged-<time>, and the new log's first record names it, its SHA-256 and what
    was wrong, and continues the store's anchored chain. Servers resume appending at once."""
    import getpass

    if not yes:
        err_console.print("this keeps the damaged log aside and starts a new one: add --yes")
        raise typer.Exit(2)
    log = _open(config)
    record = log.recover(by=f"cli:{getpass.getuser()}")
    console.print(
        f"new audit log started at record {record['seq']}; the damaged log is "
        f"{log.path.parent / record['damaged_file']}"
    )


def _open(config: ConfigOption) -> AuditLog:
    from sandgate.audit import build_audit
    from sandgate.secrets import SecretStore

    cfg = load(config)
    return build_audit(cfg, open_store(cfg), SecretStore(cfg.secrets))
