"""Metrics sampling cost: the gateway's CPU per sandbox with 50 sandboxes running, next to the
bare reads of the same counters measured in the same run.

Usage: ``uv run python bench/metrics_sampling.py [--sandboxes 50] [--window 30] [--rounds 2]
[--runtimes bwrap,docker]`` (as root, with the ``base`` template built). Per runtime it starts
one server (fresh home), creates the sandboxes, then restarts the server (the sandboxes live on
and are adopted) in turn with:

* ``quiet``: metrics every hour, log collection every hour (nothing during the window);
* ``metrics``: metrics every 5 s (the default), log collection every hour;
* ``telemetry``: metrics and log collection every 5 s (the defaults).

For each it reads the server process's CPU time (every thread's ``schedstat``) over a window
of idle sandboxes. The sampling cost is ``metrics`` minus ``quiet``, per sandbox, in % of one CPU.
The raw baseline reads the same files (``memory.usage_in_bytes``/``memory.current``,
``memory.stat``, ``cpuacct.usage``/``cpu.stat``) and ``statvfs`` of the same disks, for the same
sandboxes, in a plain loop in this process: the least any sampler must do.

Writes ``bench/results/metrics_sampling.json`` and the "Metrics sampling" section of
docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import httpx
from tests.fixtures.runtimes import RuntimeView, runtime_env
from tests.fixtures.server import RunningServer, ServerFactory
from tests.framework.envd import create, run

from bench._report import machine, write_results, write_section

INTERVAL_S = 5.0
SETTLE_S = 10.0
CONFIGS = {
    "quiet": {"METRICS__INTERVAL_S": "3600", "SANDBOX_LOGS__COLLECT_INTERVAL_S": "3600"},
    "metrics": {"METRICS__INTERVAL_S": str(INTERVAL_S), "SANDBOX_LOGS__COLLECT_INTERVAL_S": "3600"},
    "telemetry": {
        "METRICS__INTERVAL_S": str(INTERVAL_S),
        "SANDBOX_LOGS__COLLECT_INTERVAL_S": str(INTERVAL_S),
    },
}
STAGE = Path("/run/sandgate-rt/stage")
TABLE_HEAD = (
    "| runtime | metrics sampling (% CPU per sandbox) | metrics + log collection "
    "| raw reads (baseline) | metrics / raw | gateway idle, `quiet` (% CPU) |\n"
    "|---|---|---|---|---|---|"
)


def cpu_seconds(pid: int) -> float:
    """CPU time of a process's threads, in nanoseconds' precision (``schedstat``; the clock
    ticks of ``/proc/<pid>/stat`` are 10 ms, too coarse for a few seconds of a sampler)."""
    total = 0
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            total += int((task / "schedstat").read_text().split()[0])
        except (OSError, ValueError, IndexError):
            continue  # a thread that ended meanwhile
    return total / 1e9


def counter_files(pid: int) -> list[Path]:
    """The files a sampler reads for the sandbox whose init is ``pid`` (v1 or v2)."""
    mounts: dict[str, Path] = {}
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        left, _, right = line.partition(" - ")
        point, rest = Path(left.split()[4]), right.split()
        if rest[0] == "cgroup":
            for option in rest[2].split(","):
                mounts.setdefault(option, point)
        elif rest[0] == "cgroup2":
            mounts.setdefault("", point)
    found: list[Path] = []
    for line in Path(f"/proc/{pid}/cgroup").read_text().splitlines():
        _, controllers, path = line.split(":", 2)
        names = controllers.split(",")
        if "memory" in names:
            base = mounts["memory"] / path.lstrip("/")
            found += [base / "memory.usage_in_bytes", base / "memory.stat"]
        if "cpuacct" in names:
            found.append(mounts["cpuacct"] / path.lstrip("/") / "cpuacct.usage")
    if not found:  # cgroup v2
        path = next(
            line.split(":", 2)[2] for line in Path(f"/proc/{pid}/cgroup").read_text().splitlines()
        )
        base = mounts[""] / path.lstrip("/")
        found = [base / "memory.current", base / "memory.stat", base / "cpu.stat"]
    return found


def raw_round_cpu(targets: list[tuple[list[Path], Path]], rounds: int = 200) -> float:
    """CPU seconds of one round of bare reads over every sandbox (mean of ``rounds``)."""
    start = time.process_time()
    for _ in range(rounds):
        for files, disk in targets:
            for path in files:
                with open(path, "rb") as handle:
                    handle.read()
            os.statvfs(disk)
    return (time.process_time() - start) / rounds


def restart(server: RunningServer, config: dict[str, str]) -> None:
    server.stop()
    server.server_env.update({f"SANDGATE_{key}": value for key, value in config.items()})
    server.start()


def measure(kind: str, count: int, window: float, rounds: int) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="sgb-metrics-") as base_dir:
        factory = ServerFactory(Path(base_dir))
        try:
            env = {
                **runtime_env(kind),
                **{f"SANDGATE_{k}": v for k, v in CONFIGS["quiet"].items()},
                "SANDGATE_LIMITS__MAX_SANDBOXES_PER_TEAM": str(count + 5),
                "SANDGATE_LIMITS__DISK_MIB": "256",
            }
            server = factory(extra_env=env)
            view = RuntimeView(kind, server)
            client = httpx.Client(headers={"X-API-Key": server.api_key}, timeout=120)
            sandboxes = [
                create(server.url, server.api_key, client=client, timeout=3600)
                for _ in range(count)
            ]
            for sandbox in sandboxes:
                result = run(
                    server.url, sandbox["sandboxID"], sandbox["envdAccessToken"], "true",
                    client=client,
                )  # fmt: skip
                assert result.exit_code == 0
            targets = [
                (counter_files(view.init_pid(s["sandboxID"])), STAGE / s["sandboxID"] / "disk")
                for s in sandboxes
            ]
            cpu: dict[str, list[float]] = {name: [] for name in CONFIGS}
            for _ in range(rounds):
                for name, config in CONFIGS.items():
                    restart(server, config)
                    time.sleep(SETTLE_S)  # adoption and start-up work end first (not a sync)
                    assert server.process is not None
                    pid = server.process.pid
                    before, began = cpu_seconds(pid), time.monotonic()
                    time.sleep(window)
                    cpu[name].append((cpu_seconds(pid) - before) / (time.monotonic() - began))
            samples = client.get(f"{server.url}/sandboxes/{sandboxes[0]['sandboxID']}/metrics")
            assert samples.status_code == 200 and samples.json(), samples.text
            raw = raw_round_cpu(targets)
            for sandbox in sandboxes:
                client.delete(f"{server.url}/sandboxes/{sandbox['sandboxID']}")
            client.close()
        finally:
            factory.close()
    quiet = statistics.median(cpu["quiet"])
    metrics = statistics.median(cpu["metrics"]) - quiet
    telemetry = statistics.median(cpu["telemetry"]) - quiet
    return {
        "windows": cpu,
        "quiet_cpu_pct": quiet * 100,
        "metrics_pct_per_sandbox": metrics / count * 100,
        "telemetry_pct_per_sandbox": telemetry / count * 100,
        "raw_round_ms": raw * 1000,
        "raw_pct_per_sandbox": raw / INTERVAL_S / count * 100,
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--sandboxes", type=int, default=50)
    parser.add_argument("--window", type=float, default=30.0)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--runtimes", default="bwrap,docker")
    args = parser.parse_args()
    kinds = [k for k in args.runtimes.split(",") if k]
    results = {kind: measure(kind, args.sandboxes, args.window, args.rounds) for kind in kinds}
    out = {
        "when": datetime.now(UTC).isoformat(),
        "machine": machine(),
        "sandboxes": args.sandboxes,
        "window_s": args.window,
        "rounds": args.rounds,
        "interval_s": INTERVAL_S,
        "runtimes": results,
    }
    write_results("metrics_sampling.json", out)

    def row(kind: str) -> str:
        r = results[kind]
        ratio = r["metrics_pct_per_sandbox"] / r["raw_pct_per_sandbox"]
        return (
            f"| {kind} | {r['metrics_pct_per_sandbox']:.4f} | {r['telemetry_pct_per_sandbox']:.4f}"
            f" | {r['raw_pct_per_sandbox']:.4f} | {ratio:.1f}x | {r['quiet_cpu_pct']:.2f} |"
        )

    totals = "; ".join(
        f"{kind} {results[kind]['metrics_pct_per_sandbox'] * args.sandboxes:.2f} % of one CPU "
        f"for metrics, {results[kind]['telemetry_pct_per_sandbox'] * args.sandboxes:.2f} % "
        "with log collection"
        for kind in kinds
    )
    body = f"""
Measured {out["when"][:19]}Z on {machine()}: {args.sandboxes} idle sandboxes per runtime, the
gateway's CPU time (every thread's `/proc/<pid>/task/*/schedstat`) over {args.rounds}
windows of {args.window:.0f} s per configuration, alternated, median taken. The server is
restarted between configurations (the sandboxes live on and are adopted); `metrics` samples
every {INTERVAL_S:.0f} s (the default), `telemetry` also collects the sandbox logs every
{INTERVAL_S:.0f} s (the default), `quiet` does neither during the window. Cost = configuration
minus `quiet`, divided by the number of sandboxes, in % of one CPU. The raw baseline reads the
same counter files and `statvfs` of the same disks in a bare loop, once per {INTERVAL_S:.0f} s.
Reproduce: `uv run python bench/metrics_sampling.py`.

{TABLE_HEAD}
{chr(10).join(row(kind) for kind in kinds)}

What a sampling round does per sandbox: the reads above (in one worker thread for all
sandboxes, no subprocess and no Docker API call once a container's cgroup is known), one row
in one batched store transaction, and the CPU share computed against the previous reading.
The gap to the raw reads is Python object work, the thread hop and the SQLite write. For the
whole host at {args.sandboxes} sandboxes: {totals}. Log collection costs more than sampling
(one guest connection per sandbox and round, even when it has nothing new).
"""
    write_section("Metrics sampling", body)
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
