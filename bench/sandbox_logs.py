"""What storing the sandbox log costs the gateway per entry, next to the database's own insert.

Every process a sandbox runs leaves at least two entries in the guest's journal (its start and
its end, plus one per output line); the collector moves them into the store every few seconds
(``telemetry/logs.py``), on the gateway's CPU. This measures that step alone, in this process:
the guest's raw entries checked and stored by ``SandboxLogs._parse`` and
``TelemetryRecords.add_log_entries`` (one transaction per batch, the ring trimmed), against

* the path the collector took until 2026-12-03: one mapped ``SandboxLogEntry`` made per
  entry, ``Session.add_all`` and a flush, the ring's trim built as a new statement each time;
* the raw baseline: the same rows inserted with ``sqlite3``'s ``executemany`` on a connection
  of its own (no check, no trim, no ORM), the least any store must do.

The three alternate batch by batch on one SQLite file each, CPU time per entry (this process's
``process_time``). Usage: ``uv run python bench/sandbox_logs.py [--entries 6000]``. Writes
``bench/results/sandbox_logs.json`` and the "Sandbox logs: storing an entry" section of
docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import json
import sqlite3
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from sqlalchemy import delete, select
from sqlalchemy.orm import Session

from bench._report import machine, write_results, write_section
from sandgate.config import SandboxLogsConfig
from sandgate.store import SandboxLogEntry, Store, TelemetryRecords
from sandgate.telemetry.logs import SandboxLogs

RING = SandboxLogsConfig().max_entries_per_sandbox


def _trim_before(s: Session, sandbox_id: str, ring: int) -> None:
    """The ring's trim as the code before wrote it: both statements built at each call."""
    cut = s.execute(
        select(SandboxLogEntry.time_ms, SandboxLogEntry.id)
        .where(SandboxLogEntry.sandbox_id == sandbox_id)
        .order_by(SandboxLogEntry.time_ms.desc(), SandboxLogEntry.id.desc())
        .offset(ring)
        .limit(1)
    ).first()
    if cut is not None:
        s.execute(
            delete(SandboxLogEntry).where(
                SandboxLogEntry.sandbox_id == sandbox_id,
                (SandboxLogEntry.time_ms < cut[0])
                | ((SandboxLogEntry.time_ms == cut[0]) & (SandboxLogEntry.id <= cut[1])),
            )
        )


def _guest_reply(first: int, count: int) -> dict[str, Any]:
    """What a guest answers a collection: its journal entries after the cursor."""
    now = time.time()
    entries = []
    for seq in range(first, first + count):
        event = ("process_start", "process_output", "process_end")[seq % 3]
        stream = "stdout" if event == "process_output" else None
        message = "hello from the sandbox" if stream else event.replace("_", " ")
        entries.append([seq, now, "info", event, 40 + seq // 3, stream, message, None])
    return {"first": first, "last": first + count - 1, "more": False, "entries": entries}


def measure(entries: int, batch: int, tmp: Path) -> dict[str, float]:
    config = SandboxLogsConfig()
    logs = {name: Store.open(f"sqlite:///{tmp / f'{name}-{batch}.db'}") for name in ("new", "orm")}
    collectors = {name: SandboxLogs(config, store, lambda _: None) for name, store in logs.items()}  # type: ignore[arg-type,return-value]
    raw = sqlite3.connect(tmp / f"raw-{batch}.db", isolation_level=None)
    raw.execute("PRAGMA journal_mode=WAL")
    raw.execute("PRAGMA synchronous=NORMAL")
    raw.execute(
        "CREATE TABLE sandbox_log_entries (id INTEGER PRIMARY KEY, sandbox_id TEXT, time_ms "
        "INTEGER, level TEXT, message TEXT, fields TEXT, size INTEGER, guest_seq INTEGER)"
    )
    raw.execute("CREATE INDEX a ON sandbox_log_entries (sandbox_id, time_ms)")
    raw.execute("CREATE INDEX b ON sandbox_log_entries (sandbox_id, guest_seq)")

    def new_path(reply: dict[str, Any], after: int) -> None:
        parsed, _, _ = collectors["new"]._parse("sbx", reply, after)
        TelemetryRecords(logs["new"]).add_log_entries(parsed, RING)

    def orm_path(reply: dict[str, Any], after: int) -> None:
        parsed, _, _ = collectors["orm"]._parse("sbx", reply, after)
        objects = [SandboxLogEntry(**entry.row()) for entry in parsed]
        with logs["orm"].session() as s:
            s.add_all(objects)
            s.flush()
            _trim_before(s, "sbx", RING)

    def raw_path(reply: dict[str, Any], _after: int) -> None:
        rows = [
            ("sbx", int(e[1] * 1000), e[2], e[6], json.dumps({"logger": "processSvc"}), 80, e[0])
            for e in reply["entries"]
        ]
        raw.execute("BEGIN")
        raw.executemany(
            "INSERT INTO sandbox_log_entries (sandbox_id, time_ms, level, message, fields, size, "
            "guest_seq) VALUES (?, ?, ?, ?, ?, ?, ?)",
            rows,
        )
        raw.execute("COMMIT")

    paths: dict[str, Callable[[dict[str, Any], int], None]] = {
        "sandgate": new_path,
        "mapped objects (before)": orm_path,
        "raw sqlite3": raw_path,
    }
    spent = {name: 0.0 for name in paths}
    seq = 1
    for index in range(entries // batch):
        reply = _guest_reply(seq, batch)
        names = list(paths) if index % 2 == 0 else list(reversed(paths))
        for name in names:
            start = time.process_time()
            paths[name](reply, seq - 1)
            spent[name] += time.process_time() - start
        seq += batch
    for store in logs.values():
        store.close()
    raw.close()
    done = (entries // batch) * batch
    return {name: seconds / done * 1e6 for name, seconds in spent.items()}


def write_doc(result: dict[str, Any]) -> None:
    rows = []
    for run in result["runs"]:
        us = run["us_per_entry"]
        base = us["raw sqlite3"]
        rows.append(
            f"| {run['batch']} | {us['sandgate']:.1f} ({us['sandgate'] / base:.1f} x) | "
            f"{us['mapped objects (before)']:.1f} ({us['mapped objects (before)'] / base:.1f} x) "
            f"| {base:.1f} |"
        )
    body = f"""Measured {result["when"]} on {result["machine"]}, SQLite. Every process a sandbox
runs leaves at least two entries in its log (start and end, plus one per output line), which
the collector checks and stores every few seconds on the gateway's CPU. Per entry, CPU time of
{result["entries"]} entries per batch size, the three paths alternating batch by batch: this
code (the guest's entries checked, then one multi-row insert and the ring's trim, both
statements built once, in one transaction), the path until 2026-12-03 (the same checks; a
mapped object per entry, flushed; the trim's statements built at each call), and `sqlite3`'s
`executemany` of the same rows on a bare table with the same indexes (the raw baseline: no
check, no trim). Reproduce: `{result["command"]}`.

| entries per batch | this code, µs per entry (ratio to raw) | the code before | raw `sqlite3` |
|---|---|---|---|
{chr(10).join(rows)}

A batch of 3 is one command's start, output line and end collected alone; 300 is a busy
sandbox's collection round. What is left above the raw insert: the checks of each untrusted
entry, SQLAlchemy's statement, the ring's trim (one indexed query per sandbox and batch) and
the transaction's own cost, which a small batch pays for few entries.
"""
    write_section("Sandbox logs: storing an entry", body)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--entries", type=int, default=6000)
    parser.add_argument("--no-doc", action="store_true", help="write only the JSON results")
    args = parser.parse_args()
    if args.entries < 600:
        parser.error("--entries must be at least 600")
    runs = []
    with tempfile.TemporaryDirectory(prefix="sgl") as tmp:
        for batch in (3, 30, 300):
            us = measure(args.entries, batch, Path(tmp))
            runs.append({"batch": batch, "us_per_entry": us})
            print(json.dumps(runs[-1]), flush=True)
    command = "uv run python bench/sandbox_logs.py"
    if args.entries != 6000:
        command += f" --entries {args.entries}"
    result = {
        "when": datetime.now(UTC).isoformat(timespec="seconds"),
        "machine": machine(),
        "entries": args.entries,
        "command": command,
        "runs": runs,
        "ratio_median": statistics.median(
            r["us_per_entry"]["sandgate"] / r["us_per_entry"]["raw sqlite3"] for r in runs
        ),
    }
    write_results("sandbox_logs.json", result)
    if not args.no_doc:
        write_doc(result)


if __name__ == "__main__":
    main()
