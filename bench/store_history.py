"""What a long-lived server's sandbox history costs the queries that look for live sandboxes.

The ``sandboxes`` table keeps every ended sandbox (a team's metrics are computed from that
history), so it only grows. Some queries look for live sandboxes by state: the reaper's look
for expired ones (every second, on the event loop), the metrics and log collectors' live list
(each every few seconds) and the server-wide quota count of every create. Before the index on
``(state, end_at)`` (migration 0010i) each of them read the whole table.

For each history size, the same store is measured with the index and without it (dropped, then
made again), the two alternating call by call; the baseline is the same query on a table with
no history. Usage: ``uv run python bench/store_history.py [--sizes 0,10000,100000,300000]
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
from sandgate.store import Sandbox, Store

INDEX = "ix_sandboxes_state_end"
TEAM = "team_bench"


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


def _set_index(store: Store, present: bool) -> None:
    with store.engine.begin() as conn:
        if present:
            conn.execute(text(f"CREATE INDEX IF NOT EXISTS {INDEX} ON sandboxes (state, end_at)"))
        else:
            conn.execute(text(f"DROP INDEX IF EXISTS {INDEX}"))
        if conn.dialect.name == "postgresql":
            conn.execute(text("ANALYZE sandboxes"))


def _time(call: Callable[[], object]) -> float:
    start = time.perf_counter()
    call()
    return time.perf_counter() - start


def measure(store: Store, sizes: list[int], calls: int) -> list[dict[str, Any]]:
    now = datetime.now(UTC)
    with store.session() as s:
        s.execute(text("DELETE FROM sandboxes"))
    store.get_or_create_team("bench", TEAM, now)
    with store.session() as s:  # ten live sandboxes, as on a quiet server
        s.execute(insert(Sandbox), _rows(10, "running", now))
    queries: dict[str, Callable[[], object]] = {
        "reaper: expired sandboxes": lambda: store.expired_sandboxes(now),
        "create: server-wide live count": lambda: store.count_live(),
        "collectors: live sandboxes": lambda: store.live_sandboxes(),
    }
    results = []
    history = 0
    for size in sizes:
        with store.session() as s:
            for start in range(history, size, 20_000):
                chunk = _rows(min(20_000, size - start), "killed", now - timedelta(days=1))
                s.execute(insert(Sandbox), chunk)
        history = size
        samples: dict[str, dict[str, list[float]]] = {
            q: {"with": [], "without": []} for q in queries
        }
        for round_ in range(calls):
            order = ("with", "without") if round_ % 2 == 0 else ("without", "with")
            for side in order:
                _set_index(store, side == "with")
                for name, call in queries.items():
                    call()  # the first after an index change plans the query again
                    samples[name][side].append(_time(call))
        _set_index(store, True)
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
    return f"""**{measured["database"]}** (ms: with the index (ratio to no history) / without it)

| ended sandboxes in the table | {" | ".join(names)} |
|---|{"---|" * len(names)}
{chr(10).join(lines)}

At {runs[-1]["history"]:,} ended sandboxes the reaper and the two collectors spent
**{per_minute["without"]:.0f} ms of every minute** on these queries without the index, and
every create {last["create: server-wide live count"]["without"]:.1f} ms on its count;
with it, {per_minute["with"]:.0f} ms a minute and
{last["create: server-wide live count"]["with"]:.1f} ms.
"""


def write_doc(result: dict[str, Any]) -> None:
    tables = "\n".join(_table(measured) for measured in result["databases"])
    body = f"""Measured {result["when"]} on {result["machine"]}. The `sandboxes` table keeps
every ended sandbox (team metrics are computed from that history), so it only grows; a server
creating ten sandboxes a second adds 864,000 rows a day. Until migration `0010i` (an index on
`(state, end_at)`) the queries that look for live sandboxes by state read all of it: the
reaper's (every second) and every create's server-wide quota count, both on the event loop
(every request waits meanwhile), and each collector's (metrics and logs, every 5 s each, in a
worker thread).
Each cell: p50 of {result["calls"]} calls with the index, its ratio to the same query with
no history, and the same store without the index (dropped and made again between calls,
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
