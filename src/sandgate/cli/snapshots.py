"""``sandgate snapshots``: what the saved sandbox disks hold, per team, from the host."""

from __future__ import annotations

import json
from typing import Annotated

import typer
from rich.table import Table

from sandgate.cli._common import ConfigOption, console, friendly_errors, load, open_store

snapshots_app = typer.Typer(
    help="Saved sandbox disks: snapshots, sandboxes paused to disk, fork captures.",
    no_args_is_help=True,
)
_MIB = 1024 * 1024


@snapshots_app.command("list")
@friendly_errors
def list_snapshots(
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON lines.")] = False,
    config: ConfigOption = None,
) -> None:
    """Lists every team's saved disks with their size, then each team's total against
    ``limits.max_snapshot_mib_per_team``."""
    from sandgate.store import SnapshotRecords

    cfg = load(config)
    rows = sorted(SnapshotRecords(open_store(cfg)).all(), key=lambda r: r.created_at)
    if as_json:
        for row in rows:
            print(
                json.dumps(
                    {
                        "id": row.id,
                        "team": row.team_id,
                        "kind": row.kind,
                        "state": row.state,
                        "name": f"{row.name}:{row.tag}" if row.name else None,
                        "source": row.source_sandbox_id,
                        "bytes": row.size_bytes,
                        "created_at": row.created_at.isoformat(),
                    }
                )
            )
        return
    table = Table("id", "team", "kind", "name", "source sandbox", "MiB", "created")
    totals: dict[str, int] = {}
    for row in rows:
        totals[row.team_id] = totals.get(row.team_id, 0) + row.size_bytes
        table.add_row(
            row.id,
            row.team_id,
            row.kind if row.state == "ready" else f"{row.kind} ({row.state})",
            f"{row.name}:{row.tag}" if row.name else "",
            row.source_sandbox_id,
            f"{row.size_bytes / _MIB:.1f}",
            row.created_at.strftime("%Y-%m-%d %H:%M:%S"),
        )
    console.print(table)
    quota = cfg.limits.max_snapshot_mib_per_team
    for team, used in sorted(totals.items()):
        console.print(f"team {team}: {used / _MIB:.1f} of {quota} MiB")
