"""Docker bursts through the official Python SDK, this code against an earlier one, burst by
burst, with a raw ``docker run`` burst in the same rounds.

Issue 17 asks for a burst of 20 concurrent creates (each followed by its first command) on
Docker within 1.05 x of 20 raw ``docker run --rm … true`` at once. Both sides' servers run at
once (no warm pool); each round runs a burst of ``--burst`` SDK creates + ``commands.run("true")``
on each side (the first side alternating by round) and a raw burst, in an order that alternates
too. The engine's ``sandgate`` OCI runtime is one per host: before each side's burst, that
side's code installs its own shim, so each side is measured with the shim it ships.

``--load N`` keeps N busy-looping processes running through the rounds: a burst is CPU-bound
on a 2-core host, and what a busy host (the peers harness's own subjects, other tenants) does
to each side is part of the answer.

Usage: ``uv run python bench/docker_bursts_paired.py --previous-src DIR [--rounds 6]
[--burst 20] [--load 0]``, where DIR is the ``src`` of the earlier code (``git archive COMMIT
src images | tar -x -C /tmp/prev``). Writes ``bench/results/docker_bursts_paired[_loadN].json``
and the "Docker bursts through the SDK, paired" section of docs/benchmarks.md (one table per
``--load``).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.fixtures.runtimes import runtime_env
from tests.fixtures.server import RunningServer, ServerFactory

from bench._report import (
    ROOT,
    add_side_arguments,
    side_head,
    side_order,
    side_sources,
    write_results,
    write_section,
)
from bench._workers import pinned_sdk, run_sdk_worker
from bench.bursts import DOCKER_RUN, raw_burst

SECTION = "Docker bursts through the SDK, paired"
_HEADER = (
    "| round | this code: ms (x raw) | before: ms (x raw) | raw `docker run` burst (ms) |\n"
    "|---|---|---|---|"
)
_INSTALL_SHIM = (
    "import docker\n"
    "from sandgate.runtimes._oci_install import ensure_shim\n"
    "ensure_shim(docker.from_env(), runc='runc', local=True)\n"
)


def install_shim(src: Path) -> None:
    """The engine's ``sandgate`` runtime becomes the shim of the code at ``src`` (as that
    code's server does when it starts)."""
    subprocess.run(
        [sys.executable, "-c", _INSTALL_SHIM],
        env={**os.environ, "PYTHONPATH": str(src)},
        check=True,
        capture_output=True,
    )


@contextlib.contextmanager
def busy(count: int) -> Iterator[None]:
    """``count`` processes spinning on a core each while the block runs."""
    hogs = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(count)]
    try:
        yield
    finally:
        for hog in hogs:
            hog.kill()
            hog.wait()


def sdk_burst(python: Path, server: RunningServer, size: int) -> float:
    """Wall seconds of one burst through the SDK."""
    out = run_sdk_worker(python, "e2b_burst.py", [size, "base"], server.env)
    if out["failures"]:
        raise SystemExit(f"{len(out['failures'])} creates of a burst failed: {out['failures']}")
    return float(out["burst_s"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_side_arguments(parser)
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--burst", type=int, default=20)
    parser.add_argument("--load", type=int, default=0, help="busy-looping processes kept running")
    args = parser.parse_args()
    sources = side_sources(parser, args)
    python = pinned_sdk().python
    samples: dict[str, list[float]] = {"this": [], "previous": [], "raw": []}
    loads = [os.getloadavg()[0]]
    env = {
        **runtime_env("docker"),
        "SANDGATE_TEMPLATES__WARM_POOL": "{}",
        "SANDGATE_LIMITS__MAX_SANDBOXES_PER_TEAM": str(args.burst + 10),
    }
    with tempfile.TemporaryDirectory(prefix="sgd", dir="/tmp") as base_dir:
        factory = ServerFactory(Path(base_dir))
        try:
            servers = {
                side: factory(extra_env={**env, "PYTHONPATH": str(src)})
                for side, src in sources.items()
            }
            with busy(args.load):
                for index in range(args.rounds):
                    order = side_order(index)
                    steps = [*order, "raw"] if index % 2 == 0 else ["raw", *order]
                    for step in steps:
                        if step != "raw":
                            install_shim(sources[step])
                        samples[step].append(
                            raw_burst(args.burst, DOCKER_RUN)
                            if step == "raw"
                            else sdk_burst(python, servers[step], args.burst)
                        )
                    loads.append(os.getloadavg()[0])
                    print(index + 1, {k: round(v[-1] * 1000) for k, v in samples.items()})
        finally:
            install_shim(sources["this"])
            factory.close()
    ratio = {side: [s / r for s, r in zip(samples[side], samples["raw"], strict=True)]
             for side in ("this", "previous")}  # fmt: skip
    result: dict[str, Any] = {
        **side_head(args, loads),
        "burst": args.burst,
        "rounds": args.rounds,
        "busy_processes": args.load,
        "samples_s": samples,
        "median_ms": {key: statistics.median(values) * 1000 for key, values in samples.items()},
        "median_ratio_to_raw": {side: statistics.median(values) for side, values in ratio.items()},
        "median_difference_ms": statistics.median(
            (a - b) * 1000 for a, b in zip(samples["this"], samples["previous"], strict=True)
        ),
        "this_faster_rounds": sum(
            a < b for a, b in zip(samples["this"], samples["previous"], strict=True)
        ),
    }
    suffix = f"_load{args.load}" if args.load else ""
    write_results(f"docker_bursts_paired{suffix}.json", result)
    write_section(SECTION, _body())


def _table(result: dict[str, Any]) -> str:
    samples = result["samples_s"]
    rows = "\n".join(
        f"| {index + 1} | {this * 1000:.0f} ({this / raw:.2f} x) | "
        f"{previous * 1000:.0f} ({previous / raw:.2f} x) | {raw * 1000:.0f} |"
        for index, (this, previous, raw) in enumerate(
            zip(samples["this"], samples["previous"], samples["raw"], strict=True)
        )
    )
    ratio = result["median_ratio_to_raw"]
    median = result["median_ms"]
    difference, faster = result["median_difference_ms"], result["this_faster_rounds"]
    busy, low, high = result["busy_processes"], *result["load"]
    verdict = "met" if ratio["this"] <= 1.05 else "not met"
    size, rounds = result["burst"], result["rounds"]
    return f"""Measured {result["when"]} on {result["machine"]}: bursts of {size}, {rounds}
rounds, {busy} busy-looping processes running (1-minute load average {low:.1f}-{high:.1f});
"this code" is {result["this"]}, "before" is {result["previous"]}.

{_HEADER}
{rows}

Medians: this code {median["this"]:.0f} ms, before {median["previous"]:.0f} ms, raw
{median["raw"]:.0f} ms; median ratio to the raw burst of its round: this code
**{ratio["this"]:.2f} x**, before {ratio["previous"]:.2f} x (target ≤ 1.05 x: **{verdict}**).
Median of the per-round differences (this - before): {difference:+.0f} ms; this code faster in
{faster} of {result["rounds"]} rounds."""


def _body() -> str:
    """One table per ``--load`` measured (each run writes its own results file), fewest busy
    processes first."""
    results = [
        json.loads(path.read_text())
        for path in (ROOT / "bench" / "results").glob("docker_bursts_paired*.json")
    ]
    results.sort(key=lambda result: result["busy_processes"])
    tables = "\n\n".join(_table(result) for result in results)
    return f"""
Both sides' servers run at once (Docker, no warm pool). Each round runs a burst of concurrent
creates through the official Python SDK (`Sandbox.create` + `commands.run("true")`, the
sandboxes killed after the burst, untimed) on each side (the first side alternating by round)
and a raw burst of as many `docker run --rm --network none … true` at once, the raw burst first
in every other round. Before each side's burst, that side's code installs its own OCI shim (the
engine has one `sandgate` runtime). Reproduce: `uv run python bench/docker_bursts_paired.py
--previous-src DIR [--rounds 6] [--burst 20] [--load 2]` (`--load N` keeps N busy-looping
processes running: a burst is CPU-bound on 2 cores, and a busy host is where a single-process
gateway loses ground).

{tables}
"""


if __name__ == "__main__":
    main()
