"""Does a bwrap burst scale with the cores or wait on a lock? One burst, 1 to N at a time.

Issue 17 asks that bursts "scale with cores, not with a lock". A lock (a global mutex, a store
write that serialises creates, one thread doing a step for all) shows in two ways: the host's
cores sit partly idle while creates wait for it, and each create costs more CPU the more of
them run at once (contention, spinning, retries). Without one, a create's CPU stays the same
however many run at once, and from as many at once as there are cores the host is busy for
the whole burst, so the burst's wall time is its CPU divided by the cores.

Each round runs the same burst of ``--burst`` creates through the official Python SDK
(``Sandbox.create`` + ``commands.run("true")``, killed after the burst, untimed) with at most
C at once, for each C of ``--at-once`` (the order rotating by round), on one bwrap server of
this code without a warm pool, and a raw burst of as many ``bwrap --unshare-all … true`` for
the target's ratio. For each C: the burst's wall time, the host's CPU per sandbox (every
process's, ``/proc/stat``), the server process's, and how busy the host's cores were over the
burst (CPU / (wall x cores)).

Usage: ``uv run python bench/burst_scaling.py [--rounds 3] [--burst 20] [--at-once 1,2,4,20]``
(as root, with Docker and the ``base`` template built). Writes
``bench/results/burst_scaling.json`` and the "Bursts scale with the cores" section of
docs/benchmarks.md.
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

from tests.fixtures.runtimes import runtime_env
from tests.fixtures.server import ServerFactory

from bench._procmem import host_cpu_seconds
from bench._report import run_head, write_results, write_section
from bench._workers import pinned_sdk, run_sdk_worker
from bench.bursts import raw_burst, raw_bwrap

#: Busier than this over a burst, the host's cores were all at work: nothing waited on a lock.
BUSY = 0.9


def measure(python: Path, rounds: int, size: int, at_once: list[int]) -> dict[str, Any]:
    env = {
        **runtime_env("bwrap"),
        "SANDGATE_TEMPLATES__WARM_POOL": "{}",
        "SANDGATE_LIMITS__MAX_SANDBOXES_PER_TEAM": str(size + 10),
    }
    cores = os.cpu_count() or 1
    samples: dict[int, dict[str, list[float]]] = {
        count: {"wall_s": [], "host": [], "server": [], "busy": []} for count in at_once
    }
    raw: dict[str, list[float]] = {"wall_s": [], "host": []}
    with tempfile.TemporaryDirectory(prefix="sgs", dir="/tmp") as base_dir:
        factory = ServerFactory(Path(base_dir))
        try:
            server = factory(extra_env=env)
            assert server.process is not None
            for index in range(rounds):
                shift = index % len(at_once)
                for count in at_once[shift:] + at_once[:shift]:
                    args = [size, "base", server.process.pid, count]
                    out = run_sdk_worker(python, "e2b_burst.py", args, server.env)
                    if out["failures"]:
                        raise SystemExit(f"creates of a burst failed: {out['failures']}")
                    got = samples[count]
                    got["wall_s"].append(out["burst_s"])
                    got["host"].append(out["host_cpu_s"] / size)
                    got["server"].append(out["server_cpu_s"] / size)
                    got["busy"].append(out["host_cpu_s"] / (out["burst_s"] * cores))
                cpu = host_cpu_seconds()
                raw["wall_s"].append(raw_burst(size, raw_bwrap()))
                raw["host"].append((host_cpu_seconds() - cpu) / size)
                print(
                    f"round {index + 1}:",
                    {count: round(got["wall_s"][-1] * 1000) for count, got in samples.items()},
                    "raw",
                    round(raw["wall_s"][-1] * 1000),
                )
        finally:
            factory.close()
    return {
        "samples": {str(count): values for count, values in samples.items()},
        "raw": raw,
        "median": {
            str(count): {key: statistics.median(values) for key, values in got.items()}
            for count, got in samples.items()
        },
        "raw_median": {key: statistics.median(values) for key, values in raw.items()},
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--burst", type=int, default=20)
    parser.add_argument("--at-once", default="1,2,4,20")
    args = parser.parse_args()
    at_once = [int(part) for part in args.at_once.split(",")]
    if not at_once or any(count < 1 or count > args.burst for count in at_once):
        raise SystemExit(f"--at-once: counts between 1 and the burst ({args.burst}), got {at_once}")
    python = pinned_sdk().python
    loads = [os.getloadavg()[0]]
    data = measure(python, args.rounds, args.burst, at_once)
    loads.append(os.getloadavg()[0])
    result: dict[str, Any] = {
        **run_head(loads),
        "cores": os.cpu_count(),
        "burst": args.burst,
        "rounds": args.rounds,
        "at_once": at_once,
        **data,
    }
    write_results("burst_scaling.json", result)
    write_section("Bursts scale with the cores", _body(result, args))


def _rows(result: dict[str, Any]) -> str:
    size, raw = result["burst"], result["raw_median"]
    lines = []
    for count in result["at_once"]:
        median = result["median"][str(count)]
        lines.append(
            f"| {count} | {median['wall_s'] * 1000:.0f} | {median['wall_s'] / raw['wall_s']:.1f} x "
            f"| {median['host'] * 1000:.1f} | {median['server'] * 1000:.1f} "
            f"| {median['busy'] * 100:.0f} % |"
        )
    lines.append(
        f"| raw `bwrap … true`, {size} at once | {raw['wall_s'] * 1000:.0f} | 1.0 x "
        f"| {raw['host'] * 1000:.1f} | | |"
    )
    return "\n".join(lines)


def _verdict(result: dict[str, Any]) -> str:
    counts = result["at_once"]
    one, most = result["median"][str(counts[0])], result["median"][str(counts[-1])]
    cores, size = result["cores"], result["burst"]
    ideal = most["host"] * size / cores
    busy = most["busy"]
    lock = (
        f"the host's cores were {busy * 100:.0f} % busy over the burst of {counts[-1]} at once"
        + (
            ": nothing waited on a lock, the burst took its CPU divided by the cores"
            if busy >= BUSY
            else f", below {BUSY * 100:.0f} %: something serialises the creates"
        )
        + f" ({ideal * 1000:.0f} ms of it, {most['wall_s'] * 1000:.0f} ms measured)"
    )
    growth = most["host"] / one["host"]
    return (
        f"- A create's CPU with {counts[-1]} at once is {growth:.2f} x what it is with "
        f"{counts[0]} at once ({most['host'] * 1000:.1f} against {one['host'] * 1000:.1f} ms), "
        f"and {lock}.\n"
        f"- So what bounds a burst is what one create costs, not a lock: the target (≤ 4 x raw) "
        f"leaves {4 * result['raw_median']['wall_s'] * cores / size * 1000:.1f} ms of CPU per "
        f'sandbox here, and a create spends {most["host"] * 1000:.1f} (split in "Where a '
        'burst\'s CPU goes" and "Where a create\'s CPU goes, process by process").'
    )


def _body(result: dict[str, Any], args: argparse.Namespace) -> str:
    return f"""
Measured {result["when"]} on {result["machine"]}, 1-minute load average
{result["load"][0]:.1f}-{result["load"][1]:.1f}; medians of {args.rounds} rounds. Each round runs
the same burst of {args.burst} creates through the official Python SDK (`Sandbox.create` +
`commands.run("true")`, killed after the burst, untimed) with at most 1, 2, ... at once (the
order rotating by round) on one bwrap server of this code without a warm pool, then a raw
burst of {args.burst} `bwrap --unshare-all … true`. CPU is the host's over the burst
(`/proc/stat`, every process) and the server process's, per sandbox; "busy" is the host's CPU
over the burst's wall time and the {result["cores"]} cores. A lock would show as creates that
cost more CPU the more run at once, and as idle cores while they wait. Reproduce: `uv run
python bench/burst_scaling.py --rounds {args.rounds} --burst {args.burst} --at-once
{args.at_once}`.

| at once | burst (ms) | x raw | CPU per sandbox (ms) | server | host busy |
|---|---|---|---|---|---|
{_rows(result)}

{_verdict(result)}
"""


if __name__ == "__main__":
    main()
