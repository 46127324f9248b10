"""What a long-lived server's history costs the queries that look for live sandboxes and
for a team's recent past.

The ``sandboxes`` table keeps every ended sandbox (a team's metrics are computed from that
history), so it only grows; so does the audit index. Some queries look for live sandboxes by
state: the reaper's look for expired ones (every second, on the event loop), the metrics and
log collectors' live list (each every few seconds) and the server-wide quota count of every
create. Before the index on ``(state, end_at)`` (migration 0010i) each of them read the whole
table. A team's metrics (the sandboxes alive in a time window) read the team's whole history,
and a team's audit search walked every team's records, before the indexes of migration 0012h.

For each history size (that many ended sandboxes and that many audit records, the team's own
few among them), the same store is measured with the indexes and without them (dropped, then
made again), the two alternating call by call; the baseline is the same query with no
history. Usage: ``uv run python bench/store_history.py [--sizes 0,10000,100000,300000]
[--calls 40] [--postgres URL]`` (SQLite, and with ``--postgres`` a scratch database made and
dropped on that server). Writes ``bench/results/store_history.json`` and the "Store: sandbox
history" section of docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import json
import secrets
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from sqlalchemy import create_engine, insert, text

from bench._report import machine, pct, write_results, write_section
from sandgate.store import Sandbox, Store, TelemetryRecords

#: The indexes measured (this code's), by name: what each is made on.
INDEXES = {
    "ix_sandboxes_state_end": "sandboxes (state, end_at)",
    "ix_sandboxes_team_ended": "sandboxes (team_id, ended_at)",
    "ix_audit_team_seq": "audit_entries (team_id, seq)",
}
TEAM = "team_bench"
OTHER = "team_other"  # whose audit records make most of that history


def _rows(count: int, state: str, started: datetime) -> list[dict[str, Any]]:
    return [
        dict(
            id=uuid.uuid4().hex,
            team_id=TEAM,
            api_key_id=None,
            template_id="base",
            alias="base",
            state=state,
            runtime="bwrap",
            runtime_ref=None,
            access_token="x",
            metadata_={},
            cpu_count=1,
            memory_mb=512,
            disk_size_mb=1024,
            envd_version="0.2.0",
            allow_internet_access=False,
            started_at=started,
            end_at=started + timedelta(minutes=5),
            ended_at=started + timedelta(minutes=1) if state == "killed" else None,
        )
        for _ in range(count)
    ]


@contextmanager
def _database(postgres: str | None, tmp: Path) -> Iterator[Store]:
    if postgres is None:
        store = Store.open(f"sqlite:///{tmp / 'bench.db'}")
        try:
            yield store
        finally:
            store.close()
        return
    name = "sg_bench_" + secrets.token_hex(4)
    admin = create_engine(
        postgres.replace("postgresql://", "postgresql+psycopg://"), isolation_level="AUTOCOMMIT"
    )
    with admin.connect() as conn:
        conn.execute(text(f"CREATE DATABASE {name}"))
    store = Store.open(postgres.rsplit("/", 1)[0] + "/" + name)
    try:
        yield store
    finally:
        store.close()
        with admin.connect() as conn:
            conn.execute(text(f"DROP DATABASE {name} WITH (FORCE)"))
        admin.dispose()


def _audit_rows(first_seq: int, count: int, now: datetime) -> list[dict[str, Any]]:
    """Audit index rows: one in ten thousand is the measured team's (a team among many)."""
    return [
        {"seq": seq, "time": now - timedelta(days=1), "event": "tool.call",
         "sandbox_id": "s", "team_id": TEAM if seq % 10_000 == 0 else OTHER, "agent": None,
         "tool": "kv", "action": "get", "outcome": "allowed", "rule_id": None,
         "duration_ms": 1.0, "hash": f"{seq:064x}"}
        for seq in range(first_seq, first_seq + count)
    ]  # fmt: skip


def _set_indexes(store: Store, present: bool) -> None:
    with store.engine.begin() as conn:
        for name, on in INDEXES.items():
            if present:
                conn.execute(text(f"CREATE INDEX IF NOT EXISTS {name} ON {on}"))
            else:
                conn.execute(text(f"DROP INDEX IF EXISTS {name}"))
        if conn.dialect.name == "postgresql":
            conn.execute(text("ANALYZE sandboxes"))
            conn.execute(text("ANALYZE audit_entries"))


def _time(call: Callable[[], object]) -> float:
    start = time.perf_counter()
    call()
    return time.perf_counter() - start


def measure(store: Store, sizes: list[int], calls: int) -> list[dict[str, Any]]:
    now = datetime.now(UTC)
    with store.session() as s:
        s.execute(text("DELETE FROM sandboxes"))
        s.execute(text("DELETE FROM audit_entries"))
    store.get_or_create_team("bench", TEAM, now)
    store.get_or_create_team("other", OTHER, now)
    with store.session() as s:  # ten live sandboxes, as on a quiet server
        s.execute(insert(Sandbox), _rows(10, "running", now))
    records = TelemetryRecords(store)
    queries: dict[str, Callable[[], object]] = {
        "reaper: expired sandboxes": lambda: store.expired_sandboxes(now),
        "create: server-wide live count": lambda: store.count_live(),
        "collectors: live sandboxes": lambda: store.live_sandboxes(),
        "team metrics: the last hour": lambda: records.lifetimes(
            TEAM, now - timedelta(hours=1), now
        ),
        "console: team's audit, newest": lambda: store.search_audit(team_id=TEAM, limit=100),
    }
    results = []
    history = 0
    for size in sizes:
        with store.session() as s:
            for start in range(history, size, 20_000):
                # Ended a day ago, all the measured team's: one team's server (a team's
                # metrics read their team's history; the other queries, everyone's).
                chunk = _rows(min(20_000, size - start), "killed", now - timedelta(days=1))
                s.execute(insert(Sandbox), chunk)
        for start in range(history, size, 20_000):
            store.add_audit_entries(_audit_rows(start + 1, min(20_000, size - start), now))
        history = size
        samples: dict[str, dict[str, list[float]]] = {
            q: {"with": [], "without": []} for q in queries
        }
        for round_ in range(calls):
            order = ("with", "without") if round_ % 2 == 0 else ("without", "with")
            for side in order:
                _set_indexes(store, side == "with")
                for name, call in queries.items():
                    call()  # the first after an index change plans the query again
                    samples[name][side].append(_time(call))
        _set_indexes(store, True)
        results.append(
            {
                "history": size,
                "p50_ms": {
                    name: {side: pct(xs, 50) * 1000 for side, xs in by_side.items()}
                    for name, by_side in samples.items()
                },
            }
        )
        print(json.dumps(results[-1]), flush=True)
    return results


def _table(measured: dict[str, Any]) -> str:
    runs = measured["runs"]
    names = list(runs[0]["p50_ms"])
    lines = []
    for run in runs:
        cells = []
        for name in names:
            got = run["p50_ms"][name]
            ratio = got["with"] / runs[0]["p50_ms"][name]["with"]
            cells.append(f"{got['with']:.2f} ({ratio:.1f} x) / {got['without']:.2f}")
        lines.append(f"| {run['history']:,} | " + " | ".join(cells) + " |")
    last = runs[-1]["p50_ms"]
    per_minute = {
        side: 60 * last["reaper: expired sandboxes"][side]
        + 24 * last["collectors: live sandboxes"][side]
        for side in ("with", "without")
    }
    return f"""**{measured["database"]}** (ms: with the indexes (ratio to no history) / without)

| ended sandboxes (and audit records) | {" | ".join(names)} |
|---|{"---|" * len(names)}
{chr(10).join(lines)}

At {runs[-1]["history"]:,} ended sandboxes the reaper and the two collectors spent
**{per_minute["without"]:.0f} ms of every minute** on these queries without the index, and
every create {last["create: server-wide live count"]["without"]:.1f} ms on its count;
with it, {per_minute["with"]:.0f} ms a minute and
{last["create: server-wide live count"]["with"]:.1f} ms. A team's metrics for the last hour
took {last["team metrics: the last hour"]["without"]:.1f} ms without the index, \
{last["team metrics: the last hour"]["with"]:.1f} ms with it; its audit search
{last["console: team's audit, newest"]["without"]:.1f} ms, \
{last["console: team's audit, newest"]["with"]:.1f} ms.
"""


def write_doc(result: dict[str, Any]) -> None:
    tables = "\n".join(_table(measured) for measured in result["databases"])
    body = f"""Measured {result["when"]} on {result["machine"]}. The `sandboxes` table keeps
every ended sandbox (team metrics are computed from that history), so it only grows; a server
creating ten sandboxes a second adds 864,000 rows a day. Until migration `0010i` (an index on
`(state, end_at)`) the queries that look for live sandboxes by state read all of it: the
reaper's (every second) and every create's server-wide quota count, both on the event loop
(every request waits meanwhile), and each collector's (metrics and logs, every 5 s each, in a
worker thread). Until migration `0012h`, a team's metrics (`/teams/{{id}}/metrics`: the
sandboxes alive in a time window) read the team's whole history, and a team's audit search
(the console's, newest first) walked every team's records: here the history is one team's
sandboxes, and audit records of which one in ten thousand is that team's.
Each cell: p50 of {result["calls"]} calls with the indexes, its ratio to the same query with
no history, and the same store without them (dropped and made again between calls,
alternating: what every server ran before). Ten live sandboxes throughout.
Reproduce: `{result["command"]}`.

{tables}"""
    write_section("Store: sandbox history", body)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="0,10000,100000,300000")
    parser.add_argument("--calls", type=int, default=40)
    parser.add_argument("--postgres", help="a PostgreSQL server URL: measured after SQLite")
    parser.add_argument("--no-doc", action="store_true", help="write only the JSON results")
    args = parser.parse_args()
    try:
        sizes = sorted({int(x) for x in args.sizes.split(",")})
    except ValueError:
        parser.error("--sizes takes comma-separated whole numbers")
    if sizes[0] != 0 or args.calls < 5:
        parser.error("--sizes must include 0 (the baseline) and --calls must be at least 5")
    command = "uv run python bench/store_history.py"
    if args.sizes != "0,10000,100000,300000":
        command += f" --sizes {args.sizes}"
    if args.calls != 40:
        command += f" --calls {args.calls}"
    if args.postgres:
        command += " --postgres URL"
    databases = []
    for postgres in [None, args.postgres] if args.postgres else [None]:
        with (
            tempfile.TemporaryDirectory(prefix="sgh") as tmp,
            _database(postgres, Path(tmp)) as store,
        ):
            version = ".".join(map(str, store.engine.dialect.server_version_info or ()))
            name = f"{store.engine.dialect.name} {version}".strip()
            print(name, flush=True)
            databases.append({"database": name, "runs": measure(store, sizes, args.calls)})
    result = {
        "when": datetime.now(UTC).isoformat(timespec="seconds"),
        "machine": machine(),
        "calls": args.calls,
        "command": command,
        "databases": databases,
    }
    write_results("store_history.json", result)
    if not args.no_doc:
        write_doc(result)


if __name__ == "__main__":
    main()
