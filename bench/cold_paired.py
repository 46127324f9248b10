"""Cold bwrap creates, this code against an earlier one, round by round, with raw ``bwrap`` in
the same rounds.

Issue 17 asks for a cold create → first command ≤ 50 ms p50 on the bwrap runtime. That
figure moves by ±10 ms (and more) from one hour to the next on this shared VM, so a change to
the cold path is judged here side by side: each round starts one server per side (this
checkout's ``src`` and the earlier tree's), no warm pool, both running at once, and measures:

* ``--creates`` cold creates per side, each followed by ``true`` through envd over HTTP with
  one kept client per server (as ``bench/bwrap.py``), the sides alternating create by create
  (the first side of each pair alternates too), and each server process's CPU time per
  create + command + kill (``/proc/PID/stat``);
* then, side after side (the order alternates by round), the same through the official Python
  SDK (``Sandbox.create`` + ``commands.run("true")``), and a burst of ``--burst`` concurrent
  ones (wall time until all first commands are done);

and, once per round, the raw baselines: ``bwrap --unshare-all … true`` ``--creates`` times,
and ``--burst`` of them at once.

Usage: ``uv run python bench/cold_paired.py --previous-src DIR [--rounds 4] [--creates 20]
[--burst 20]``, where DIR is the ``src`` of the earlier code (``git archive COMMIT src |
tar -x -C /tmp/prev``). Writes ``bench/results/cold_paired.json`` and the "Cold start on
bwrap, paired" section of docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import httpx
from tests.fixtures.runtimes import runtime_env
from tests.fixtures.server import RunningServer, ServerFactory
from tests.framework.envd import create, run

from bench._procmem import cpu_seconds
from bench._report import (
    add_side_arguments,
    pct,
    round_medians,
    side_head,
    side_order,
    side_sources,
    timed,
    write_results,
    write_section,
)
from bench._workers import pinned_sdk, run_sdk_worker
from bench.bursts import raw_burst, raw_bwrap


def _server(factory: ServerFactory, src: Path) -> RunningServer:
    return factory(
        extra_env={
            **runtime_env("bwrap"),
            "SANDGATE_TEMPLATES__WARM_POOL": "{}",
            "PYTHONPATH": str(src),  # the side's code, ahead of the installed package
        }
    )


def _cold(server: RunningServer, client: httpx.Client) -> float:
    start = time.perf_counter()
    sandbox = create(server.url, server.api_key, client=client)
    sid, token = sandbox["sandboxID"], sandbox["envdAccessToken"]
    result = run(server.url, sid, token, "true", client=client)
    elapsed = time.perf_counter() - start
    if result.exit_code != 0:
        raise SystemExit(f"`true` exited {result.exit_code} in {sid}")
    client.delete(f"{server.url}/sandboxes/{sid}")
    return elapsed


def _round(
    factory: ServerFactory,
    python: Path,
    sources: dict[str, Path],
    order: list[str],
    args: argparse.Namespace,
) -> dict[str, dict[str, float]]:
    """Both sides' servers run at once; their envd creates alternate sample by sample (so
    the VM's drift reaches both alike), then each side's SDK worker runs in ``order``."""
    servers = {side: _server(factory, sources[side]) for side in order}
    clients = {
        side: httpx.Client(headers={"X-API-Key": server.api_key}, timeout=120)
        for side, server in servers.items()
    }
    try:
        for side in order:  # the tree, the caches
            _cold(servers[side], clients[side])
        samples: dict[str, list[float]] = {side: [] for side in order}
        pids = {side: server.process.pid for side, server in servers.items() if server.process}
        before = {side: cpu_seconds(pid) for side, pid in pids.items()}
        for index in range(args.creates):
            for side in order if index % 2 == 0 else order[::-1]:
                samples[side].append(_cold(servers[side], clients[side]))
        cpu = {side: cpu_seconds(pid) - before[side] for side, pid in pids.items()}
        sdk = {
            side: run_sdk_worker(
                python, "e2b_lifecycle.py", [args.creates, args.burst, 0, "base"], servers[side].env
            )
            for side in order
        }
    finally:
        for client in clients.values():
            client.close()
        for server in servers.values():
            server.stop()
    out: dict[str, dict[str, float]] = {}
    for side in order:
        failures = sdk[side]["sequential_failures"] + sdk[side]["burst_failures"]
        if failures:
            raise SystemExit(f"{failures} SDK creates failed on {sources[side]}")
        out[side] = {
            "envd_p50_ms": pct(samples[side], 50) * 1000,
            "sdk_p50_ms": pct(sdk[side]["sequential"], 50) * 1000,
            "sdk_burst_ms": max(sdk[side]["burst"]) * 1000,
            "cpu_ms_per_sandbox": cpu[side] * 1000 / args.creates,
        }
    return out


def _raw(args: argparse.Namespace) -> dict[str, float]:
    argv = raw_bwrap()
    return {
        "bwrap_p50_ms": pct([timed(argv) for _ in range(args.creates)], 50) * 1000,
        "bwrap_burst_ms": raw_burst(args.burst, argv) * 1000,
    }


def write_doc(result: dict[str, Any]) -> None:
    rows = []
    for index, rnd in enumerate(result["rounds"], 1):
        raw = rnd["raw"]
        for side in rnd["order"]:
            values = rnd[side]
            rows.append(
                f"| {index} | {result[side]} | {values['envd_p50_ms']:.1f} | "
                f"{values['sdk_p50_ms']:.1f} | {values['sdk_burst_ms']:.0f} "
                f"({values['sdk_burst_ms'] / raw['bwrap_burst_ms']:.1f} x) | "
                f"{values['cpu_ms_per_sandbox']:.1f} |"
            )
        rows.append(
            f"| {index} | raw `bwrap … true` | {raw['bwrap_p50_ms']:.1f} | | "
            f"{raw['bwrap_burst_ms']:.0f} | |"
        )
    med, diff = result["median"], result["median_difference"]
    header = (
        "| round | side | envd: create → first command p50 (ms) | SDK: create → first "
        f"command p50 (ms) | SDK burst of {result['burst']} (ms, x raw) | gateway CPU per "
        "sandbox (ms) |"
    )
    body = f"""
Measured {result["when"]} on {result["machine"]}, 1-minute load average
{result["load"][0]:.1f}-{result["load"][1]:.1f}. Each round starts one server per side, both
running at once, no warm pool, and measures {result["creates"]} cold creates per side, each
followed by `true`: through envd over HTTP with one kept client (as "Runtimes"), the sides
alternating create by create, with each gateway process's CPU per create + command + kill;
then side after side (the order alternates by round) through the official Python SDK
(`Sandbox.create` + `commands.run("true")`), and a burst of {result["burst"]} concurrent SDK
creates (wall time until every first command is done); the raw baselines (`bwrap
--unshare-all … true`, {result["creates"]} in a row and {result["burst"]} at once) run in the
same round. "This code" is {result["this"]}, "before" is {result["previous"]}. Reproduce:
`{result["command"]}`.

{header}
|---|---|---|---|---|---|
{chr(10).join(rows)}

Medians of the rounds: this code {med["this"]["envd_p50_ms"]:.1f} ms through envd
({med["previous"]["envd_p50_ms"]:.1f} before), {med["this"]["sdk_p50_ms"]:.1f} ms through the SDK
({med["previous"]["sdk_p50_ms"]:.1f}), bursts {med["this"]["sdk_burst_ms"]:.0f} ms
({med["previous"]["sdk_burst_ms"]:.0f}), gateway CPU {med["this"]["cpu_ms_per_sandbox"]:.1f} ms per
sandbox ({med["previous"]["cpu_ms_per_sandbox"]:.1f}); raw `bwrap … true`
{med["raw"]["bwrap_p50_ms"]:.1f} ms, a raw burst {med["raw"]["bwrap_burst_ms"]:.0f} ms. Median
of the per-round differences (this - before): {diff["envd_p50_ms"]:+.1f} ms through envd,
{diff["sdk_p50_ms"]:+.1f} ms through the SDK, {diff["sdk_burst_ms"]:+.0f} ms per burst,
{diff["cpu_ms_per_sandbox"]:+.1f} ms of gateway CPU per sandbox.
"""
    write_section("Cold start on bwrap, paired", body)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_side_arguments(parser)
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--creates", type=int, default=20)
    parser.add_argument("--burst", type=int, default=20)
    parser.add_argument("--no-doc", action="store_true", help="write only the JSON results")
    args = parser.parse_args()
    sources = side_sources(parser, args)
    if args.rounds < 1 or args.creates < 5 or args.burst < 1:
        parser.error("--rounds ≥ 1, --creates ≥ 5 and --burst ≥ 1")
    client = pinned_sdk()
    rounds: list[dict[str, Any]] = []
    loads = [os.getloadavg()[0]]
    with tempfile.TemporaryDirectory(prefix="sgp", dir="/tmp") as base_dir:
        factory = ServerFactory(Path(base_dir))
        try:
            for index in range(args.rounds):
                order = side_order(index)
                rnd: dict[str, Any] = {"order": order, "raw": _raw(args)}
                rnd.update(_round(factory, client.python, sources, order, args))
                for side in order:
                    print(index + 1, side, rnd[side], flush=True)
                print(index + 1, "raw", rnd["raw"], flush=True)
                rounds.append(rnd)
                loads.append(os.getloadavg()[0])
        finally:
            factory.close()
    median, difference = round_medians(rounds, [*sources, "raw"])
    result = {
        **side_head(args, loads),
        "creates": args.creates,
        "burst": args.burst,
        "command": (
            f"uv run python bench/cold_paired.py --previous-src DIR --rounds {args.rounds} "
            f"--creates {args.creates} --burst {args.burst}"
        ),
        "rounds": rounds,
        "median": median,
        "median_difference": difference,
    }
    write_results("cold_paired.json", result)
    if not args.no_doc:
        write_doc(result)


if __name__ == "__main__":
    main()
