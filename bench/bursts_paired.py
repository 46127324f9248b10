"""Bursts on bwrap, this code against an earlier one, burst by burst, with a raw burst in the
same rounds.

``bench/bursts.py`` measures a burst next to a raw burst launched while the previous round's
sandboxes are still being torn down, which inflates the raw baseline; and this VM's speed moves
from one hour to the next. Here both sides' servers run at once (no warm pool) and their bursts
of ``--burst`` concurrent creates (each followed by ``true`` through envd over HTTP) alternate,
the first side of each round alternating too; a raw burst (``--burst`` ``bwrap --unshare-all …
true`` at once) follows each round, once both sides' sandboxes are gone.

Usage: ``uv run python bench/bursts_paired.py --previous-src DIR [--rounds 8] [--burst 20]``,
where DIR is the ``src`` of the earlier code (``git archive COMMIT src images | tar -x -C
/tmp/prev``). Writes ``bench/results/bursts_paired.json`` and the "Bursts on bwrap, paired"
section of docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import httpx
from tests.fixtures.runtimes import runtime_env
from tests.fixtures.server import ServerFactory

from bench._report import (
    add_side_arguments,
    side_head,
    side_order,
    side_sources,
    write_results,
    write_section,
)
from bench.bursts import FAILURES, raw_burst, raw_bwrap, sandgate_burst


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_side_arguments(parser)
    parser.add_argument("--rounds", type=int, default=8)
    parser.add_argument("--burst", type=int, default=20)
    args = parser.parse_args()
    sources = side_sources(parser, args)
    samples: dict[str, list[float]] = {"this": [], "previous": [], "raw": []}
    loads = [os.getloadavg()[0]]
    with tempfile.TemporaryDirectory(prefix="sgq", dir="/tmp") as base_dir:
        factory = ServerFactory(Path(base_dir))
        try:
            env = {**runtime_env("bwrap"), "SANDGATE_TEMPLATES__WARM_POOL": "{}"}
            servers = {
                side: factory(extra_env={**env, "PYTHONPATH": str(src)})
                for side, src in sources.items()
            }
            clients = {
                side: httpx.Client(headers={"X-API-Key": server.api_key}, timeout=120)
                for side, server in servers.items()
            }
            for side in sources:  # the tree, the caches, the connections
                sandgate_burst(servers[side], clients[side], 5)
            for index in range(args.rounds):
                order = side_order(index)
                for side in order:
                    samples[side].append(sandgate_burst(servers[side], clients[side], args.burst))
                samples["raw"].append(raw_burst(args.burst, raw_bwrap()))
                loads.append(os.getloadavg()[0])
                print(index + 1, {k: round(v[-1] * 1000) for k, v in samples.items()}, flush=True)
            for client in clients.values():
                client.close()
        finally:
            factory.close()
    if FAILURES:
        raise SystemExit(f"{len(FAILURES)} creates failed: {FAILURES[:3]}")
    median = {key: statistics.median(values) * 1000 for key, values in samples.items()}
    difference = statistics.median(
        (a - b) * 1000 for a, b in zip(samples["this"], samples["previous"], strict=True)
    )
    result: dict[str, Any] = {
        **side_head(args, loads),
        "burst": args.burst,
        "rounds": args.rounds,
        "samples_s": samples,
        "median_ms": median,
        "median_difference_ms": difference,
    }
    write_results("bursts_paired.json", result)
    rows = "\n".join(
        f"| {index + 1} | {this * 1000:.0f} | {previous * 1000:.0f} | {raw * 1000:.0f} | "
        f"{this / raw:.1f} x |"
        for index, (this, previous, raw) in enumerate(
            zip(samples["this"], samples["previous"], samples["raw"], strict=True)
        )
    )
    body = f"""
Measured {result["when"]} on {result["machine"]}, 1-minute load average
{result["load"][0]:.1f}-{result["load"][1]:.1f}. Both sides' servers run at once (bwrap, no warm
pool); their bursts of {args.burst} concurrent creates, each followed by `true` through envd,
alternate (the first side alternates by round), and a raw burst of {args.burst} `bwrap
--unshare-all … true` follows each round, once both sides' sandboxes are gone. "This code" is
{result["this"]}, "before" is {result["previous"]}. Reproduce: `uv run python
bench/bursts_paired.py --previous-src DIR --rounds {args.rounds} --burst {args.burst}`.

| round | this code (ms) | before (ms) | raw burst (ms) | this / raw |
|---|---|---|---|---|
{rows}

Medians: this code {median["this"]:.0f} ms, before {median["previous"]:.0f} ms, raw
{median["raw"]:.0f} ms ({median["this"] / median["raw"]:.1f} x; target ≤ 4 x: **{
        "met" if median["this"] <= 4 * median["raw"] else "not met"
    }**). Median of the per-round differences (this - before): {difference:+.0f} ms.
"""
    write_section("Bursts on bwrap, paired", body)


if __name__ == "__main__":
    main()
