"""The telemetry retention prunes: how long each one holds every other write of the server.

Every minute the metrics sampler deletes samples past their retention and the log collector
deletes entries past theirs (and, over the table's size cap, the oldest). SQLite holds the
database's write lock for a whole DELETE statement (every create, kill, audit record and
sample waits), so what matters is how much the prune reads while it holds it. Until migration
``0011t`` neither table had an index on ``time_ms``: each prune read the whole table, and the
log prune summed the table's size inside the same write transaction.

On one SQLite file holding ``--rows`` samples and as many log entries, each round prunes one
minute's worth at 500 running sandboxes (6,000 rows of each), alternating this code (the
indexes, the size summed in a read of its own) with the code before (the indexes dropped, the
sum inside the write, as it was), while a writer thread commits a one-row update every 2 ms:
its longest wait is what a create or an audit record would have waited. The raw baseline is
that writer's own p50. Usage: ``uv run python bench/store_prune.py [--rows 2000000]
[--rounds 6]``. Writes ``bench/results/store_prune.json`` and the "Store: retention prunes"
section of docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import threading
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from sqlalchemy import delete, func, insert, select, text

from bench._report import machine, write_results, write_section
from sandgate.store import SandboxLogEntry, SandboxMetricSample, Store, TelemetryRecords

PER_MINUTE = 6000  # rows a minute at 500 running sandboxes sampled every 5 s
STEP_MS = 10  # the rows' spacing in time


def _fill(store: Store, rows: int, now_ms: int) -> None:
    with store.session() as s:
        for start in range(0, rows, 50_000):
            span = range(start, min(rows, start + 50_000))
            times = [now_ms - (rows - i) * STEP_MS for i in span]
            s.execute(insert(SandboxMetricSample), [
                dict(sandbox_id=f"s{i % 500}", time_ms=t, cpu_count=1, cpu_used_pct=0.5,
                     mem_used=1, mem_total=2, mem_cache=0, disk_used=3, disk_total=4)
                for i, t in zip(span, times, strict=True)
            ])  # fmt: skip
            s.execute(insert(SandboxLogEntry), [
                dict(sandbox_id=f"s{i % 500}", time_ms=t, level="info",
                     message="process started", fields={"logger": "processSvc"}, size=120,
                     guest_seq=i)
                for i, t in zip(span, times, strict=True)
            ])  # fmt: skip


_TIME_INDEXES = {
    "ix_sandbox_metrics_time": "sandbox_metrics",
    "ix_sandbox_log_entries_time": "sandbox_log_entries",
}


def _set_indexes(store: Store, present: bool) -> None:
    with store.engine.begin() as conn:
        for index, table in _TIME_INDEXES.items():
            if present:
                conn.execute(text(f"CREATE INDEX IF NOT EXISTS {index} ON {table} (time_ms)"))
            else:
                conn.execute(text(f"DROP INDEX IF EXISTS {index}"))


def _prune_logs_before(store: Store, before_ms: int, cap: int) -> None:
    """The log prune as it was: the age delete and the size sum in one write transaction."""
    with store.session() as s:
        s.execute(delete(SandboxLogEntry).where(SandboxLogEntry.time_ms < before_ms))
        total = int(s.scalar(select(func.coalesce(func.sum(SandboxLogEntry.size), 0))) or 0)
        assert total <= cap  # the cap is not reached here: the age delete is what is measured


def _with_writer(store: Store, work: Any) -> tuple[float, list[float]]:
    """Runs ``work`` while a thread commits a one-row update every 2 ms; returns the work's
    duration and every wait of the writer."""
    waits: list[float] = []
    stop = threading.Event()

    def writer() -> None:
        while not stop.is_set():
            start = time.perf_counter()
            with store.engine.begin() as conn:
                conn.execute(text("UPDATE bench_writes SET n = n + 1 WHERE id = 1"))
            waits.append(time.perf_counter() - start)
            time.sleep(0.002)

    thread = threading.Thread(target=writer)
    thread.start()
    time.sleep(0.2)
    start = time.perf_counter()
    work()
    took = time.perf_counter() - start
    time.sleep(0.2)
    stop.set()
    thread.join()
    return took, waits


def measure(rows: int, rounds: int, tmp: Path) -> dict[str, Any]:
    store = Store.open(f"sqlite:///{tmp / 'bench.db'}")
    records = TelemetryRecords(store)
    now_ms = int(time.time() * 1000)
    _fill(store, rows, now_ms)
    with store.engine.begin() as conn:
        conn.execute(text("CREATE TABLE bench_writes (id INTEGER PRIMARY KEY, n INTEGER)"))
        conn.execute(text("INSERT INTO bench_writes VALUES (1, 0)"))
    cutoff = now_ms - rows * STEP_MS
    cap = 10**15
    results: dict[str, dict[str, list[float]]] = {
        side: {"samples_s": [], "logs_s": [], "longest_wait_s": [], "writer_p50_s": []}
        for side in ("this code", "before")
    }
    for index in range(rounds):
        side = "this code" if index % 2 == 0 else "before"
        _set_indexes(store, side == "this code")
        cutoff += PER_MINUTE * STEP_MS

        def prune(side: str = side, cutoff: int = cutoff) -> tuple[float, float]:
            start = time.perf_counter()
            records.prune_samples(cutoff)
            middle = time.perf_counter()
            if side == "this code":
                records.prune_logs(cutoff, cap)
            else:
                _prune_logs_before(store, cutoff, cap)
            return middle - start, time.perf_counter() - middle

        timings: list[tuple[float, float]] = []
        _, waits = _with_writer(store, lambda timings=timings, prune=prune: timings.append(prune()))
        got = results[side]
        got["samples_s"].append(timings[0][0])
        got["logs_s"].append(timings[0][1])
        got["longest_wait_s"].append(max(waits))
        got["writer_p50_s"].append(statistics.median(waits))
        print(index + 1, side, {k: round(v[-1] * 1000, 1) for k, v in got.items()}, flush=True)
    store.close()
    return {
        side: {key: statistics.median(values) * 1000 for key, values in got.items()}
        for side, got in results.items()
    }


_HEADER = (
    "| (ms, median) | sample prune | log prune | longest wait of a concurrent write "
    "| that writer's p50 (raw baseline) |\n|---|---|---|---|---|"
)


def _row(label: str, ms: dict[str, float]) -> str:
    return (
        f"| {label} | {ms['samples_s']:.0f} | {ms['logs_s']:.0f} | "
        f"**{ms['longest_wait_s']:.0f}** | {ms['writer_p50_s']:.2f} |"
    )


def write_doc(result: dict[str, Any]) -> None:
    this, before = result["ms"]["this code"], result["ms"]["before"]
    body = f"""Measured {result["when"]} on {result["machine"]}, SQLite. One file holding
{result["rows"]:,} metric samples and as many log entries (a little under six hours of
samples at 500 running sandboxes; a day is 8.6 million); each of {result["rounds"]} rounds
prunes one minute's worth of each (6,000 rows), this code and the code before alternating
(the `time_ms` indexes of migration `0011t` dropped and made again; the log prune's size sum
inside its write transaction, as it was), while a writer thread commits a one-row update every
2 ms: its longest wait is what a create, a kill or an audit record waited. Medians over the
rounds of each side. Reproduce: `{result["command"]}`.

{_HEADER}
{_row("this code", this)}
{_row("the code before", before)}

What is left of this code's figure is the deletion itself (6,000 rows out of three indexes
per table); the log prune's sum still reads the whole table, now in a read of its own, which
does not hold writers in SQLite's WAL mode.
"""
    write_section("Store: retention prunes", body)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=2_000_000)
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--no-doc", action="store_true", help="write only the JSON results")
    args = parser.parse_args()
    if args.rows < 100_000 or args.rounds < 2:
        parser.error("--rows must be at least 100000 and --rounds at least 2")
    if args.rows < PER_MINUTE * (args.rounds + 1):
        parser.error("--rows too small for that many rounds")
    with tempfile.TemporaryDirectory(prefix="sgp") as tmp:
        ms = measure(args.rows, args.rounds, Path(tmp))
    command = "uv run python bench/store_prune.py"
    if args.rows != 2_000_000:
        command += f" --rows {args.rows}"
    if args.rounds != 6:
        command += f" --rounds {args.rounds}"
    result = {
        "when": datetime.now(UTC).isoformat(timespec="seconds"),
        "machine": machine(),
        "rows": args.rows,
        "rounds": args.rounds,
        "command": command,
        "ms": ms,
    }
    write_results("store_prune.json", result)
    if not args.no_doc:
        write_doc(result)


if __name__ == "__main__":
    main()
