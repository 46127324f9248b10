"""How long ``sandgate serve`` takes from its exec to its first healthy ``/health``.

The test suite starts a real server a few hundred times, so this time is paid again and again.
Each sample execs ``python -m sandgate serve`` on a prepared home (config, store and key made
once, by the tests' server factory) and polls ``GET /health`` every 5 ms until it answers 200;
the server is then stopped with SIGTERM (not timed). Baselines in the same run:

* ``python -c pass``: the interpreter alone, exec to exit;
* ``python -c "import sandgate.api.app"``: the server's imports alone, exec to exit.

Two configurations: the default one (nothing optional configured) and one with a workflow,
an MCP tool and an agent configured, which loads the parts the default one leaves unimported.

Usage: ``uv run python bench/serve_start.py [--samples 15]``. Writes
``bench/results/serve_start.json`` and the "Server start" section of docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.fixtures.server import RunningServer, ServerFactory

from bench._procmem import cpu_seconds
from bench._report import ROOT, machine, summary_ms, write_section

POLL_S = 0.005
MCP_SERVER = ROOT / "tests" / "integration" / "tools" / "mcp_server.py"

FEATURES_CONFIG = f"""
tools:
  - {{name: kv, kind: builtin}}
  - name: echo
    kind: mcp
    transport: stdio
    command: [{sys.executable}, {MCP_SERVER}]
policy:
  rules:
    - {{id: bench, effect: allow, tool: kv, action: get}}
agents:
  - id: helper
    model: bench-model
workflows:
  - name: one
    steps:
      - {{id: a, kind: tool, tool: kv, arguments: {{op: get, key: a}}}}
"""


Samples = tuple[list[float], list[float]]


def process_time(argv: list[str], samples: int, env: dict[str, str] | None = None) -> Samples:
    """Exec to exit of ``argv``: wall time, and CPU time (user + system) of the process."""
    times, cpu = [], []
    for _ in range(samples):
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        started = time.perf_counter()
        subprocess.run(argv, check=True, stdout=subprocess.DEVNULL, env=env)
        times.append(time.perf_counter() - started)
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpu.append(after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime)
    return times, cpu


def no_bytecode(base: dict[str, str]) -> dict[str, str]:
    """``base`` where no ``.pyc`` is found nor written: every module compiled from source at
    every start, as on a host with ``PYTHONDONTWRITEBYTECODE`` set and no bytecode compiled
    ahead (the CI image sets it; scripts/serve and scripts/test now compile ahead)."""
    empty = tempfile.mkdtemp(prefix="sg-bench-nopyc-")
    return {**base, "PYTHONDONTWRITEBYTECODE": "1", "PYTHONPYCACHEPREFIX": empty}


def serve_time(server: RunningServer, samples: int, env: dict[str, str] | None = None) -> Samples:
    """Exec of ``sandgate serve`` to its first 200 on ``/health``: wall time, and the server
    process's CPU time at that moment (less sensitive to a busy machine than wall time)."""
    argv = [sys.executable, "-m", "sandgate", "serve", *server.args]
    times, cpu = [], []
    with httpx.Client(timeout=2.0) as http:
        for _ in range(samples):
            started = time.perf_counter()
            with server.log_path.open("ab") as log:
                process = subprocess.Popen(
                    argv,
                    env=env or server.server_env,
                    stdin=subprocess.DEVNULL,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,
                )
            try:
                while True:
                    if process.poll() is not None:
                        raise SystemExit(f"sandgate serve exited; see {server.log_path}")
                    try:
                        if http.get(f"{server.url}/health").status_code == 200:
                            break
                    except httpx.TransportError:
                        pass
                    time.sleep(POLL_S)
                times.append(time.perf_counter() - started)
                cpu.append(cpu_seconds(process.pid))
            finally:
                process.send_signal(signal.SIGTERM)
                process.wait(timeout=60)
    return times, cpu


def paired_serve_time(
    server: RunningServer, samples: int, previous: str
) -> tuple[Samples, Samples]:
    """``serve_time`` of this code and of the sources at ``previous`` (on ``PYTHONPATH``),
    sample by sample, the order alternating: a comparison a busy machine moves alike."""
    this: Samples = ([], [])
    before: Samples = ([], [])
    sides = [(this, None), (before, {**server.server_env, "PYTHONPATH": previous})]
    for index in range(samples):
        for (wall, used), env in sides if index % 2 == 0 else sides[::-1]:
            one_wall, one_used = serve_time(server, 1, env)
            wall += one_wall
            used += one_used
    return this, before


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--samples", type=int, default=15)
    parser.add_argument(
        "--previous",
        metavar="SRC",
        help="a `src` directory of other code (e.g. the previous commit's, from `git "
        "archive`): its default-config start is measured too, interleaved with this code's",
    )
    args = parser.parse_args()
    python = sys.executable
    factory = ServerFactory(Path(tempfile.mkdtemp(prefix="sg-bench-start-")))
    try:
        default = factory()
        default.stop()
        features = factory(
            config=FEATURES_CONFIG,
            extra_env={"OPENAI_BASE_URL": "http://127.0.0.1:9/v1", "OPENAI_API_KEY": "bench"},
        )
        features.stop()
        results = {
            "python -c pass": process_time([python, "-c", "pass"], args.samples),
            "import sandgate.api.app": process_time(
                [python, "-c", "import sandgate.api.app"], args.samples
            ),
        }
        if args.previous:
            this, before = paired_serve_time(default, args.samples, args.previous)
            results["serve → healthy (default config)"] = this
            results["serve → healthy (default config), previous code"] = before
        else:
            results["serve → healthy (default config)"] = serve_time(default, args.samples)
        results["serve → healthy (workflow, MCP tool, agent)"] = serve_time(features, args.samples)
        results["import sandgate.api.app, no .pyc"] = process_time(
            [python, "-c", "import sandgate.api.app"], args.samples, no_bytecode(dict(os.environ))
        )
        results["serve → healthy (default config), no .pyc"] = serve_time(
            default, args.samples, no_bytecode(default.server_env)
        )
    finally:
        factory.close()
    summaries = {name: summary_ms(wall) for name, (wall, _) in results.items()}
    cpu = {name: summary_ms(used) for name, (_, used) in results.items()}
    base = cpu["python -c pass"]["p50"]
    load = os.getloadavg()[0]
    out = ROOT / "bench" / "results" / "serve_start.json"
    out.write_text(
        json.dumps({"machine": machine(), "load_1m": load, "wall": summaries, "cpu": cpu}, indent=2)
        + "\n"
    )
    rows = "\n".join(
        f"| {name} | {s['p50']:.0f} | {s['p95']:.0f} | {cpu[name]['p50']:.0f} "
        f"| {cpu[name]['p50'] / base:.1f}x |"
        for name, s in summaries.items()
    )
    print(rows)
    previous = " --previous /tmp/prev/src" if args.previous else ""
    paired = ""
    if args.previous:
        this_cpu = results["serve → healthy (default config)"][1]
        before_cpu = results["serve → healthy (default config), previous code"][1]
        saved = sorted(1000 * (b - a) for a, b in zip(this_cpu, before_cpu, strict=True))
        paired = (
            " The previous code's row (the previous commit's `src`, unpacked with `git "
            "archive COMMIT src | tar -x -C /tmp/prev`) alternates with this code's, sample by "
            f"sample: CPU saved per pair of starts, median {statistics.median(saved):.0f} ms "
            f"(from {saved[0]:.0f} to {saved[-1]:.0f}; {sum(d > 0 for d in saved)} of "
            f"{len(saved)} pairs in this code's favour)."
        )
        print(paired)
    write_section(
        "Server start",
        f"""
Measured {datetime.now(UTC).isoformat(timespec="seconds")} on {machine()} (1-minute load
average {load:.1f} at the end). Each sample execs `python -m sandgate serve` on a prepared home
(SQLite store, runtime `auto`) and polls `GET /health` every 5 ms until it answers 200; the
baselines are the bare interpreter and the server's imports alone, exec to exit, in the same
run. CPU is the process's user + system time at that moment (all threads; not the MCP
server it starts): on a shared, busy machine it moves much less than wall time.
Reproduce: `uv run python bench/serve_start.py --samples {args.samples}{previous}`.{paired}

| exec → ready (ms, n={args.samples}) | wall p50 | wall p95 | CPU p50 | CPU / `python -c pass` |
|---|---|---|---|---|
{rows}

The "no .pyc" rows compile every module from source at each start (an empty
`PYTHONPYCACHEPREFIX`, nothing written): what every `sandgate` process paid where
`PYTHONDONTWRITEBYTECODE` is set, as on the CI image, before scripts/serve and scripts/test
compiled the environment and the sources ahead (`uv sync --compile-bytecode`, `compileall`).
A `pip install` compiles at install time; `uv sync` does not unless asked.

The test suite starts a real server a few hundred times; what the server imports before it
serves is paid each time. Optional parts are imported when they are configured or first
used: the MCP SDK when an `mcp` tool is configured or at the first `/v1/mcp` request, DBOS
when workflows may have work at start (shared workflows, unfinished runs, an explicit
`workflows.database_url`) or at the first run, a model provider's SDK when an agent first
calls it. Still imported by every start: the Docker SDK (also on bwrap-only servers) and,
through the CLI, every command's modules (`rich.markdown` for `chat`). Not done at a start any
more (2026-12-02): Alembic, unless the store is at an older revision (a new database gets the
models' schema at once, a current one is left alone: opening a new SQLite store went from
0.35 to 0.04 s of CPU), and the guest zipapp's compile and compression, unless its sources
changed (~0.1 s). Since 2026-12-03 FastAPI analyses each route's parameters once: the ~90
routes of the E2B and `/v1` routers were added with `include_router`, whose routes FastAPI
(0.16x) analyses a second time at the first request, and the API-key dependency declared its
two headers as parameters, analysed again for every route that uses it. In one process, three
runs each of the code before and after, the same hour: building the application 0.45-0.60 →
0.27-0.29 s, the first request 0.11-0.17 → 0.003 s.
""",
    )


if __name__ == "__main__":
    main()
