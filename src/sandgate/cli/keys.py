"""``sandgate keys``: API keys for the E2B-compatible API."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Annotated

import typer
from rich.table import Table

from sandgate.cli._common import ConfigOption, console, friendly_errors, load, open_store

keys_app = typer.Typer(help="Create, list and revoke API keys.", no_args_is_help=True)


@keys_app.command("create")
@friendly_errors
def create(
    name: Annotated[str, typer.Option(help="A label to recognise the key by.")] = "default",
    team: Annotated[str, typer.Option(help="Team the key belongs to (created if new).")] = (
        "default"
    ),
    scope: Annotated[
        list[str] | None,
        typer.Option(
            help="Limit the key to this scope (repeatable): approvals = list and decide the "
            "team's approvals, nothing else (for an approver service); read = sign in to "
            "the web console read-only. Default: a full key."
        ),
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
    config: ConfigOption = None,
) -> None:
    """Creates a key and prints it once; only its hash is stored."""
    from sandgate.access import create_api_key

    store = open_store(load(config))
    scopes = frozenset(scope) if scope else None
    row, plaintext = create_api_key(store, team, name, scopes)
    if as_json:
        print(
            json.dumps(
                {
                    "id": row.id,
                    "key": plaintext,
                    "team": row.team_id,
                    "name": name,
                    "scopes": sorted(scopes) if scopes else None,
                }
            )
        )
        return
    limited = f" limited to {', '.join(sorted(scopes))}" if scopes else ""
    console.print(f"API key [bold]{row.id}[/] for team {team}{limited}:\n{plaintext}")
    console.print("Store it now: it cannot be shown again.")


@keys_app.command("list")
@friendly_errors
def list_keys(
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON lines.")] = False,
    config: ConfigOption = None,
) -> None:
    """Lists keys (prefixes only, never the keys)."""
    store = open_store(load(config))
    rows = store.list_api_keys()
    if as_json:
        for row in rows:
            print(
                json.dumps(
                    {
                        "id": row.id,
                        "name": row.name,
                        "team": row.team_id,
                        "prefix": row.prefix,
                        "scopes": row.scopes.split(",") if row.scopes else None,
                        "revoked": row.revoked_at is not None,
                    }
                )
            )
        return
    table = Table("id", "name", "team", "scopes", "prefix", "created", "revoked")
    for row in rows:
        table.add_row(
            row.id,
            row.name,
            row.team_id,
            row.scopes or "all",
            row.prefix + "…",
            row.created_at.strftime("%Y-%m-%d %H:%M"),
            row.revoked_at.strftime("%Y-%m-%d %H:%M") if row.revoked_at else "",
        )
    console.print(table)


@keys_app.command("revoke")
@friendly_errors
def revoke(key_id: str, config: ConfigOption = None) -> None:
    """Revokes a key by id; requests with it fail at once."""
    store = open_store(load(config))
    if not store.revoke_api_key(key_id, datetime.now(UTC)):
        console.print(f"no key with id {key_id} (see `sandgate keys list`)")
        raise typer.Exit(1)
    console.print(f"revoked {key_id}")
