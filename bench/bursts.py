"""Bursts: N concurrent creates → all first commands done, on bwrap and on Docker, next to N raw
``bwrap`` / ``docker run`` launched concurrently in the same run (interleaved, round by round),
and a burst the size of a warm pool's max served from that pool.

Usage: ``uv run python bench/bursts.py [--burst 20] [--rounds 3] [--pool 8]`` (as root, with
Docker and the ``base`` template built). Starts one server per runtime (fresh homes, no warm
pool) and one bwrap server with ``templates.warm_pool: {base: {min: 2, max: POOL}}``; drives
them over HTTP with the test suite's small envd client (one shared client, no SDK overhead);
writes ``bench/results/bursts.json`` and the "Bursts" section of docs/benchmarks.md.

A burst's time is the wall time from the release of N threads (a barrier) until the last of
them has its first command's answer (Sandgate) or its process has exited (raw). The pooled
run first drains the pool with one burst of POOL (it grows toward max), waits until the pool
holds POOL again (``sandgate_warm_pool_sandboxes``), then measures a burst of POOL.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import httpx
from tests.fixtures.runtimes import runtime_env
from tests.fixtures.server import TEST_ROOTFS_DIR, RunningServer, ServerFactory
from tests.framework.envd import create, run

from bench._report import machine, write_results, write_section

IMAGE = "sandgate/template-base:latest"
DOCKER_RUN = ["docker", "run", "--rm", "--network", "none", IMAGE, "true"]


def raw_bwrap() -> list[str]:
    rootfs = next(p for p in TEST_ROOTFS_DIR.iterdir() if p.is_dir() and len(p.name) == 64)
    return ["bwrap", "--unshare-all", "--ro-bind", str(rootfs), "/", "--proc", "/proc",
            "--dev", "/dev", "--", "/bin/true"]  # fmt: skip


def burst(size: int, one: Callable[[], Any]) -> tuple[float, list[Any]]:
    """Wall time of ``size`` concurrent ``one()`` calls, and their results."""
    barrier = threading.Barrier(size + 1)
    results: list[Any] = []
    lock = threading.Lock()

    def worker() -> None:
        barrier.wait()
        value = one()
        with lock:
            results.append(value)

    threads = [threading.Thread(target=worker) for _ in range(size)]
    for thread in threads:
        thread.start()
    barrier.wait()
    start = time.perf_counter()
    for thread in threads:
        thread.join()
    return time.perf_counter() - start, results


def raw_burst(size: int, argv: list[str]) -> float:
    elapsed, _ = burst(size, lambda: subprocess.run(argv, check=True, capture_output=True))
    return elapsed


FAILURES: list[str] = []


def sandgate_burst(server: RunningServer, client: httpx.Client, size: int) -> float:
    """Wall time of a burst; a create or command that fails is recorded in ``FAILURES`` (and
    reported next to the figures), not retried."""

    def one() -> str | None:
        try:
            sandbox = create(server.url, server.api_key, client=client)
            sid, token = sandbox["sandboxID"], sandbox["envdAccessToken"]
            result = run(server.url, sid, token, "true", client=client)
        except (AssertionError, httpx.HTTPError) as exc:
            FAILURES.append(str(exc)[:300])
            return None
        if result.exit_code != 0:
            FAILURES.append(f"`true` exited {result.exit_code}")
        return str(sid)

    elapsed, ids = burst(size, one)
    for sid in ids:
        if sid is not None:
            client.delete(f"{server.url}/sandboxes/{sid}")
    return elapsed


def pool_size(server: RunningServer) -> int:
    text = httpx.get(f"{server.url}/metrics", timeout=30).text
    found = re.search(r'^sandgate_warm_pool_sandboxes\{template="base"\} (\S+)$', text, re.M)
    return int(float(found.group(1))) if found else 0


def wait_pool(server: RunningServer, size: int, timeout: float = 300) -> float:
    start = time.monotonic()
    while pool_size(server) < size:
        if time.monotonic() - start > timeout:
            raise RuntimeError(f"the warm pool did not reach {size} in {timeout:.0f} s")
        time.sleep(0.2)  # polling a gauge from outside: there is nothing to wait on
    return time.monotonic() - start


def server_for(factory: ServerFactory, kind: str, extra: dict[str, str]) -> RunningServer:
    env = {**runtime_env(kind), "SANDGATE_LIMITS__MAX_SANDBOXES_PER_TEAM": "100", **extra}
    return factory(extra_env=env)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--burst", type=int, default=20)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--pool", type=int, default=8)
    parser.add_argument("--runtimes", default="bwrap,docker")
    args = parser.parse_args()
    kinds = args.runtimes.split(",")
    limits = httpx.Limits(max_connections=200, max_keepalive_connections=200)
    loads = [os.getloadavg()[0]]
    ours: dict[str, list[float]] = {k: [] for k in kinds}
    raw: dict[str, list[float]] = {k: [] for k in kinds}
    pooled: dict[str, float] = {}
    raw_argv = {"bwrap": raw_bwrap(), "docker": DOCKER_RUN}
    with tempfile.TemporaryDirectory(prefix="sgb", dir="/tmp") as base_dir:
        factory = ServerFactory(Path(base_dir))
        try:
            servers = {k: server_for(factory, k, {}) for k in kinds}
            client = httpx.Client(timeout=300, limits=limits)
            for kind, server in servers.items():  # exports the rootfs, warms caches
                sandgate_burst(server, client, 2)
                raw_burst(2, raw_argv[kind])
            for _ in range(args.rounds):
                for kind, server in servers.items():
                    ours[kind].append(sandgate_burst(server, client, args.burst))
                    raw[kind].append(raw_burst(args.burst, raw_argv[kind]))
                    loads.append(os.getloadavg()[0])
            for server in servers.values():
                server.stop()
            pool_env = {
                "SANDGATE_TEMPLATES__WARM_POOL": f"{{base: {{min: 2, max: {args.pool}}}}}",
                "SANDGATE_OBSERVABILITY__PROMETHEUS": "true",
            }
            server = server_for(factory, "bwrap", pool_env)
            wait_pool(server, 2)
            pooled["drain"] = sandgate_burst(server, client, args.pool)
            pooled["regrow_s"] = wait_pool(server, args.pool)
            pooled["warm"] = sandgate_burst(server, client, args.pool)
            pooled["raw"] = raw_burst(args.pool, raw_argv["bwrap"])
            loads.append(os.getloadavg()[0])
            client.close()
        finally:
            factory.close()

    def median(values: list[float]) -> float:
        return sorted(values)[len(values) // 2]

    results: dict[str, Any] = {
        "when": datetime.now(UTC).isoformat(timespec="seconds"),
        "machine": machine(),
        "burst": args.burst,
        "rounds": args.rounds,
        "load_1m": loads,
        "sandgate_s": ours,
        "raw_s": raw,
        "pool": {"max": args.pool, **pooled},
        "failures": FAILURES,
    }
    write_results("bursts.json", results)

    rows = []
    for kind in kinds:
        a, b = median(ours[kind]), median(raw[kind])
        ratio = median([x / y for x, y in zip(ours[kind], raw[kind], strict=True)])
        raw_name = "`bwrap … true`" if kind == "bwrap" else "`docker run --rm … true`"
        target = "≤ 4x" if kind == "bwrap" else "≤ 1.05x"
        rows.append(
            f"| {kind}: burst of {args.burst} | {a * 1000:.0f} | raw {raw_name} x{args.burst}: "
            f"{b * 1000:.0f} | {ratio:.2f}x | {target} |"
        )
    p = pooled
    rows.append(
        f"| bwrap, warm pool (max {args.pool}): burst of {args.pool} | {p['warm'] * 1000:.0f} | "
        f"raw `bwrap … true` x{args.pool}: {p['raw'] * 1000:.0f} | "
        f"{p['warm'] / p['raw']:.2f}x | warm |"
    )
    rows.append(
        f"| bwrap, pool at min 2: burst of {args.pool} (drains, grows it) | "
        f"{p['drain'] * 1000:.0f} | | | |"
    )
    cores = os.cpu_count() or 1
    loaded = (
        f"This run is from a loaded machine (1-minute load up to {max(loads):.0f} on {cores} "
        "cores): the raw baselines themselves ran far above their quiet time, so these ratios "
        "say little about the targets; see below for what is and is not met."
        if max(loads) > cores
        else ""
    )
    body = f"""
Measured {results["when"]} on {results["machine"]}; 1-minute load average during the run
{min(loads):.2f}-{max(loads):.2f}. Burst of {args.burst} concurrent creates, each followed by
`true` through envd over HTTP (one shared client), wall time until all are done; the raw
baseline launches {args.burst} processes at once in the same round; median of {args.rounds}
interleaved rounds. Reproduce: `uv run python bench/bursts.py --burst {args.burst}
--rounds {args.rounds} --pool {args.pool}`.

| measure (ms, median) | Sandgate | raw baseline | ratio (median of rounds) | target |
|---|---|---|---|---|
{chr(10).join(rows)}

The pool grew from 2 to {args.pool} after the draining burst and was full again
{p["regrow_s"]:.1f} s later (refills boot up to 4 at once). Failed creates in the whole run:
{len(FAILURES)}{"" if not FAILURES else " (first: " + FAILURES[0][:160] + ")"}.
{loaded}

Where a burst's time goes (py-spy, `--idle`, on the gateway during bursts of 20): before
2026-12-02 the runtimes ran their blocking work through `asyncio.to_thread`, whose default
executor has `cpu_count + 4` threads (6 here) shared with audit appends and snapshots, so a
burst of 20 launched 6 at a time; every uid-slot claim walked all of `/proc` once per orphaned
claim (a host whose sandbox homes were deleted under live sandboxes has dozens), and one global
lock serialised the making of each slot's user namespace (a helper process). Now the runtimes
have their own 64 threads (and Docker client connections), a claim walks `/proc` at most once,
namespaces are locked per range, and the stub and host-directory files are written off the
event loop. What is left: on bwrap the gateway's event loop is idle about 80 % of a burst and
the runtime threads mostly wait; the time is the 20 guests' own start (CPython + `asyncio`,
~55 ms of CPU each on a quiet machine, ~1.1 s of CPU for 20 on 2 cores against ~0.1 s for 20
raw `bwrap … true`), so the ≤ 4x target is **not met on a quiet machine** with the Python guest
(a ratio under 4 measured at a high load average is the load inflating the raw baseline, not a
pass); it needs the lean guest of point 1. On Docker the runtime threads wait on the engine
(create, start and an inspect for the pid, through Sandgate's OCI shim) and then on the guest
start; the ≤ 1.05x target is **not met**: the engine's work per container plus the guest's
start stays above raw `docker run … true`, which starts no daemon.
"""
    write_section("Bursts", body)
    print(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
