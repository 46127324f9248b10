"""Workflow overhead per step, next to calling the same tool directly; 100 concurrent runs.

1. **Baseline**: the ``kv get`` tool called directly through the gateway pipeline (policy,
   audit fsynced, store index), in process, ``--calls`` times.
2. **Per step**: a workflow of ``--chain`` sequential ``kv get`` steps on a real server. Each
   sample is the time from one step's end to the next one's end (start the child DBOS
   workflow, checkpoint the "started" marker, call the tool through the same pipeline,
   checkpoint the result, record the step, let the scheduler see it), taken from the run's
   step records.
3. **Concurrent**: ``--runs`` runs of a 5-step workflow (a diamond plus a tail) started at
   once over the HTTP API; all must complete.

Usage: ``uv run python bench/workflows.py [--store sqlite|postgres] [--chain 30] [--runs 100]``.
PostgreSQL needs ``SANDGATE_TEST_POSTGRES_URL``. Writes ``bench/results/workflows-<store>.json``
and the "Workflows (<store>)" section of docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import os
import secrets
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.fixtures.server import ServerFactory

from bench._report import machine, summary_ms, write_results, write_section

CONFIG = """
tools: [{name: kv, kind: builtin}]
policy:
  rules:
    - {id: bench, effect: allow, tool: kv, action: get}
workflows:
  - name: chain
    steps:
CHAIN
  - name: five
    concurrency: 8
    steps:
      - {id: a, kind: tool, tool: kv, arguments: {op: get, key: a}}
      - {id: b, kind: tool, tool: kv, arguments: {op: get, key: b}, depends_on: [a]}
      - {id: c, kind: tool, tool: kv, arguments: {op: get, key: c}, depends_on: [a]}
      - {id: d, kind: tool, tool: kv, arguments: {op: get, key: d}, depends_on: [b, c]}
      - {id: e, kind: tool, tool: kv, arguments: {op: get, key: e}, depends_on: [d]}
"""


def chain_config(length: int) -> str:
    lines = []
    for i in range(length):
        after = f", depends_on: [s{i - 1}]" if i else ""
        lines.append(
            f"      - {{id: s{i}, kind: tool, tool: kv, arguments: {{op: get, key: k{i}}}{after}}}"
        )
    return CONFIG.replace("CHAIN", "\n".join(lines))


def direct_calls(config_text: str, calls: int) -> list[float]:
    """The same tool through the same pipeline, without a workflow around it."""
    from sandgate.config import load_config
    from sandgate.policy import Subject
    from sandgate.store import Store
    from sandgate.tools import build_gateway

    home = Path(tempfile.mkdtemp(prefix="sgb-direct-"))
    path = home / "config.yaml"
    path.write_text(config_text)
    config = load_config(path, environ={"SANDGATE_HOME": str(home)})
    store = Store.open(config.store_url)
    gateway = build_gateway(config, store)
    subject = Subject(sandbox_id="bench", team_id="bench")

    async def measure() -> list[float]:
        samples = []
        for i in range(calls + 20):
            started = time.perf_counter()
            result = await gateway.call(subject, "kv", {"op": "get", "key": f"k{i}"})
            if not result.ok:
                raise SystemExit(f"direct call failed: {result.message}")
            if i >= 20:
                samples.append(time.perf_counter() - started)
        return samples

    try:
        return asyncio.run(measure())
    finally:
        store.close()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--store", choices=["sqlite", "postgres"], default="sqlite")
    parser.add_argument("--chain", type=int, default=30)
    parser.add_argument("--runs", type=int, default=100)
    parser.add_argument("--calls", type=int, default=300)
    args = parser.parse_args()
    config = chain_config(args.chain)
    direct = direct_calls(config, args.calls)

    env: dict[str, str] = {"SANDGATE_RUNTIME": "bwrap"}
    drop = None
    if args.store == "postgres":
        import psycopg

        base = os.environ["SANDGATE_TEST_POSTGRES_URL"]
        name = "sgb_wf_" + secrets.token_hex(4)
        with psycopg.connect(base, autocommit=True) as conn:
            conn.execute(f"CREATE DATABASE {name}")
        env["SANDGATE_STORE__URL"] = (
            base.rsplit("/", 1)[0].replace("postgresql://", "postgresql+psycopg://") + f"/{name}"
        )

        def drop() -> None:
            with psycopg.connect(base, autocommit=True) as conn:
                conn.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")

    factory = ServerFactory(Path(tempfile.mkdtemp(prefix="sgb-")))
    try:
        server = factory(config=config, extra_env=env)
        http = httpx.Client(base_url=server.url, headers={"X-API-Key": server.api_key}, timeout=600)
        per_step: list[float] = []
        chain_runs = 3
        for _ in range(chain_runs):
            run = wait(http, start(http, "chain"))
            ends = sorted(datetime.fromisoformat(s["ended_at"]) for s in run["steps"])
            per_step += [(b - a).total_seconds() for a, b in itertools.pairwise(ends)]

        started = time.perf_counter()
        with ThreadPoolExecutor(max_workers=16) as pool:
            ids = list(pool.map(lambda _: start(http, "five"), range(args.runs)))
            finished = list(pool.map(lambda run_id: wait(http, run_id), ids))
        concurrent_s = time.perf_counter() - started
    finally:
        factory.close()
        if drop is not None:
            drop()
    completed = sum(1 for r in finished if r["state"] == "completed")
    step_ms, direct_ms = summary_ms(per_step), summary_ms(direct)
    results: dict[str, Any] = {
        "store": args.store,
        "direct_call_ms": direct_ms,
        "per_step_ms": step_ms,
        "overhead_ratio_p50": step_ms["p50"] / direct_ms["p50"],
        "chain_length": args.chain,
        "concurrent": {
            "runs": args.runs,
            "steps_per_run": 5,
            "completed": completed,
            "seconds": concurrent_s,
            "steps_per_s": completed * 5 / concurrent_s,
        },
        "measured_at": datetime.now(UTC).isoformat(timespec="seconds"),
    }
    write_results(f"workflows-{args.store}.json", results)
    c = results["concurrent"]
    write_section(
        f"Workflows ({args.store})",
        f"""
Measured {results["measured_at"]} on {machine()}; DBOS Transact's system database and
Sandgate's store both on {
            "PostgreSQL (the test server, fsync off)"
            if args.store == "postgres"
            else "SQLite (WAL, synchronous FULL)"
        }. Baseline: the same `kv get` through the same gateway
pipeline (policy, audit fsynced, store index), called directly in process. Per step: a chain
of {args.chain} sequential `kv get` steps, each sample the time from one step's end to the
next one's end (child workflow, "started" marker checkpoint (kv is a write), the call, the
result checkpoint, the step record, the scheduler's durable wait), {chain_runs} runs.
Reproduce: `uv run python bench/workflows.py --store {args.store}`.

| ms | p50 | p95 | p99 |
|---|---|---|---|
| tool called directly (pipeline + audit) | {direct_ms["p50"]:.2f} | {direct_ms["p95"]:.2f} | {
            direct_ms["p99"]:.2f} |
| one workflow step calling it | {step_ms["p50"]:.2f} | {step_ms["p95"]:.2f} | {
            step_ms["p99"]:.2f} |

Overhead per step at p50: **{step_ms["p50"] - direct_ms["p50"]:.1f} ms**
({results["overhead_ratio_p50"]:.1f} times the direct call). {c["runs"]} runs of a 5-step
workflow (diamond + tail) started at once: **{c["completed"]}/{c["runs"]} completed** in
{c["seconds"]:.1f} s ({c["steps_per_s"]:.0f} steps/s).
""",
    )
    print(json.dumps(results, indent=2))


def start(http: httpx.Client, name: str) -> str:
    response = http.post(f"/v1/workflows/{name}/runs", json={"inputs": {}})
    response.raise_for_status()
    return str(response.json()["id"])


def wait(http: httpx.Client, run_id: str) -> dict[str, Any]:
    with http.stream("GET", f"/v1/workflow-runs/{run_id}/events") as response:
        for _ in response.iter_lines():
            pass
    run: dict[str, Any] = http.get(f"/v1/workflow-runs/{run_id}").json()
    return run


if __name__ == "__main__":
    main()
