"""Where a burst's CPU goes, on both runtimes, next to the raw burst it is compared with.

Issue 17's burst targets compare the wall time of 20 concurrent creates (each followed by its
first command, through the official Python SDK) with 20 raw starts at once: ≤ 4 x raw
``bwrap … true`` on bwrap, ≤ 1.05 x raw ``docker run --rm … true`` on Docker. On a 2-core host
such a burst is CPU-bound, so its wall time is the CPU it needs divided by the cores; this
bench measures that CPU, split by who spends it (host-wide, from ``/proc/stat``, over the burst
only; the SDK worker reads it at the burst's start and end):

* the Sandgate server's process (HTTP, store, runtime calls, hooks, audit hand-over);
* the server's helper processes (the audit writer: sealing, writing and indexing records);
* the SDK client's process (20 threads in one interpreter, as a user's program would be);
* everything else: the runtime (bubblewrap and its launcher; or the engine, its shims and
  Sandgate's OCI shim) and the sandboxes themselves (each guest's start, the first command).

From the raw burst's wall time it derives the **budget**: the CPU per sandbox that the target's
wall time leaves on this host's cores (``target x raw wall x cores / burst``). A target is out of
reach of any gateway while "everything else" alone is above it.

Usage: ``uv run python bench/burst_budget.py [--rounds 5] [--burst 20]``. Writes
``bench/results/burst_budget.json`` and the "Where a burst's CPU goes" section of
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
from bench.bursts import DOCKER_RUN, raw_burst, raw_bwrap

TARGET = {"bwrap": 4.0, "docker": 1.05}
_HEADER = (
    "| runtime | burst (ms) | raw burst (ms) | ratio (target) | CPU per sandbox (ms) | server "
    "| audit writer | SDK client | runtime + sandbox | raw, per start | budget |\n"
    "|---|---|---|---|---|---|---|---|---|---|---|"
)
RAW = {"bwrap": "`bwrap --unshare-all … true`", "docker": "`docker run --rm --network none … true`"}


def measure(kind: str, python: Path, rounds: int, size: int) -> dict[str, Any]:
    raw_argv = raw_bwrap() if kind == "bwrap" else DOCKER_RUN
    env = {
        **runtime_env(kind),
        "SANDGATE_TEMPLATES__WARM_POOL": "{}",
        "SANDGATE_LIMITS__MAX_SANDBOXES_PER_TEAM": str(size + 10),
    }
    samples: dict[str, list[float]] = {
        key: []
        for key in ("wall_s", "raw_wall_s", "host", "server", "helpers", "client", "raw_host")
    }
    with tempfile.TemporaryDirectory(prefix="sgb", dir="/tmp") as base_dir:
        factory = ServerFactory(Path(base_dir))
        try:
            server = factory(extra_env=env)
            assert server.process is not None
            for index in range(rounds):
                for step in ("sandgate", "raw") if index % 2 == 0 else ("raw", "sandgate"):
                    if step == "raw":
                        cpu = host_cpu_seconds()
                        samples["raw_wall_s"].append(raw_burst(size, raw_argv))
                        samples["raw_host"].append((host_cpu_seconds() - cpu) / size)
                        continue
                    out = run_sdk_worker(
                        python, "e2b_burst.py", [size, "base", server.process.pid], server.env
                    )
                    if out["failures"]:
                        raise SystemExit(f"{kind}: creates of a burst failed: {out['failures']}")
                    samples["wall_s"].append(out["burst_s"])
                    samples["host"].append(out["host_cpu_s"] / size)
                    samples["server"].append(out["server_cpu_s"] / size)
                    samples["helpers"].append(out["helpers_cpu_s"] / size)
                    samples["client"].append(out["client_cpu_s"] / size)
                print(kind, index + 1, {k: round(v[-1] * 1000) for k, v in samples.items()})
        finally:
            factory.close()
    samples["rest"] = [
        host - server - helpers - client
        for host, server, helpers, client in zip(
            samples["host"], samples["server"], samples["helpers"], samples["client"], strict=True
        )
    ]
    median = {key: statistics.median(values) * 1000 for key, values in samples.items()}
    cores = os.cpu_count() or 1
    median["budget"] = TARGET[kind] * median["raw_wall_s"] * cores / size
    return {"samples_s": samples, "median_ms": median}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--burst", type=int, default=20)
    args = parser.parse_args()
    python = pinned_sdk().python
    loads = [os.getloadavg()[0]]
    runtimes = {}
    for kind in ("bwrap", "docker"):
        runtimes[kind] = measure(kind, python, args.rounds, args.burst)
        loads.append(os.getloadavg()[0])
    result: dict[str, Any] = {
        **run_head(loads),
        "cores": os.cpu_count(),
        "burst": args.burst,
        "rounds": args.rounds,
        "runtimes": runtimes,
    }
    write_results("burst_budget.json", result)
    write_section("Where a burst's CPU goes", _body(result, args))


def _row(kind: str, median: dict[str, float]) -> str:
    ratio = median["wall_s"] / median["raw_wall_s"]
    return (
        f"| {kind} | {median['wall_s']:.0f} | {median['raw_wall_s']:.0f} | {ratio:.2f} x "
        f"(≤ {TARGET[kind]:g} x) | {median['host']:.1f} | {median['server']:.1f} | "
        f"{median['helpers']:.1f} | {median['client']:.1f} | {median['rest']:.1f} | "
        f"{median['raw_host']:.1f} | **{median['budget']:.1f}** |"
    )


def _verdicts(result: dict[str, Any]) -> str:
    """Per runtime: the best ratio a server and a client that cost nothing would leave (the
    rest's CPU spread over every core), next to the target."""
    lines = []
    cores, size = result["cores"], result["burst"]
    for kind, data in result["runtimes"].items():
        median = data["median_ms"]
        floor = median["rest"] * size / cores / median["raw_wall_s"]
        if floor > TARGET[kind]:
            lines.append(
                f"- {kind}: the runtime and the sandboxes alone spend {median['rest']:.1f} ms "
                f"of CPU per sandbox (the budget is {median['budget']:.1f}): even with a "
                f"server, its helpers and a client that cost nothing, a burst would take at "
                f"least {floor:.1f} x the raw one (target ≤ {TARGET[kind]:g} x). The target "
                "is out of reach of the gateway here."
            )
        else:
            over = median["host"] - median["budget"]
            lines.append(
                f"- {kind}: a server, its helpers and a client that cost nothing would leave "
                f"{floor:.2f} x (target ≤ {TARGET[kind]:g} x); the whole burst spends "
                + (
                    f"{over:.1f} ms per sandbox over its budget, the server "
                    f"{median['server']:.1f} of it."
                    if over > 0
                    else f"{-over:.1f} ms per sandbox less than its budget."
                )
            )
    return "\n".join(lines)


def _body(result: dict[str, Any], args: argparse.Namespace) -> str:
    rows = "\n".join(_row(kind, data["median_ms"]) for kind, data in result["runtimes"].items())
    return f"""
Measured {result["when"]} on {result["machine"]}, 1-minute load average
{result["load"][0]:.1f}-{result["load"][1]:.1f}; medians of {args.rounds} rounds per runtime. Each
round runs a burst of {args.burst} concurrent creates through the official Python SDK
(`Sandbox.create` + `commands.run("true")`, killed after the burst, untimed) on a server of this
code (no warm pool) and a raw burst of {args.burst} ({RAW["bwrap"]} on bwrap, {RAW["docker"]} on
Docker), the order alternating by round. CPU is the host's over the burst (`/proc/stat`),
divided by the burst's size, and split by who spent it: the Sandgate server's process, its
helper process (the audit writer), the SDK client's process, and the rest (the runtime —
bubblewrap and its launcher, or the engine, its shims and Sandgate's OCI shim — and the
sandboxes: each guest's start, the first command). The
budget is the CPU per sandbox the target's wall time leaves on the host's {result["cores"]}
cores (target x raw wall x cores / burst). Reproduce: `uv run python bench/burst_budget.py
--rounds {args.rounds} --burst {args.burst}`.

{_HEADER}
{rows}

{_verdicts(result)}
"""


if __name__ == "__main__":
    main()
