"""Docker cold start, paired: create → first command on Sandgate's Docker runtime next to raw
``docker run --rm … true``, one of each per round, the order alternating, so both see the same
moment of a shared machine.

Why paired: raw ``docker run`` alone moves by more than the 10 % margin of the target from one
minute to the next on a shared VM (the engine's and containerd's own work dominate), so two
medians taken minutes apart cannot show a ratio within ±10 %. Each round gives one ratio; the
figure of record is the median of the rounds' ratios, with its spread (quartiles).

Usage: ``uv run python bench/docker_cold.py [--rounds 40]`` (as root, with Docker and the
``base`` template built). Starts one server (fresh home, Docker runtime, no warm pool), drives
it over HTTP with the test suite's small envd client (one client for the run, as an SDK keeps
one), writes ``bench/results/docker_cold.json`` and the "Docker cold start, paired" section of
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
from tests.fixtures.runtimes import runtime_env
from tests.fixtures.server import ServerFactory
from tests.framework.envd import create, run

from bench._report import machine, pct, summary_ms, write_results, write_section
from bench.bwrap import DOCKER_RUN, timed

TARGET = 1.1


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=40)
    args = parser.parse_args()
    if args.rounds < 2:
        parser.error("--rounds must be at least 2")
    ours: list[float] = []
    raw: list[float] = []
    loads: list[float] = []
    with tempfile.TemporaryDirectory(prefix="sgb-") as base_dir:
        factory = ServerFactory(Path(base_dir))
        try:
            server = factory(extra_env=runtime_env("docker"))
            client = httpx.Client(headers={"X-API-Key": server.api_key}, timeout=120)

            def sandgate() -> float:
                start = time.perf_counter()
                sandbox = create(server.url, server.api_key, client=client)
                result = run(
                    server.url, sandbox["sandboxID"], sandbox["envdAccessToken"], "true",
                    client=client,
                )  # fmt: skip
                elapsed = time.perf_counter() - start
                assert result.exit_code == 0, result
                client.delete(f"{server.url}/sandboxes/{sandbox['sandboxID']}")
                return elapsed

            # One of each first, unmeasured: the image's layers and the engine's caches warm.
            sandgate()
            timed(DOCKER_RUN)
            for index in range(args.rounds):
                if index % 2 == 0:
                    ours.append(sandgate())
                    raw.append(timed(DOCKER_RUN))
                else:
                    raw.append(timed(DOCKER_RUN))
                    ours.append(sandgate())
                loads.append(os.getloadavg()[0])
                print(
                    f"round {index + 1}/{args.rounds}: sandgate {ours[-1] * 1000:.0f} ms, "
                    f"docker run {raw[-1] * 1000:.0f} ms",
                    file=sys.stderr,
                )
            client.close()
        finally:
            factory.close()
    ratios = [a / b for a, b in zip(ours, raw, strict=True)]
    result: dict[str, Any] = {
        "when": datetime.now(UTC).isoformat(timespec="seconds"),
        "machine": machine(),
        "rounds": args.rounds,
        "sandgate_docker": summary_ms(ours),
        "raw_docker_run": summary_ms(raw),
        "ratio_median": statistics.median(ratios),
        "ratio_q1": pct(ratios, 25),
        "ratio_q3": pct(ratios, 75),
        "rounds_within_target": sum(r <= TARGET for r in ratios),
        "load_1min": [min(loads), max(loads)],
        "samples_s": {"sandgate": ours, "raw": raw},
    }
    write_results("docker_cold.json", result)
    _write_doc(result)
    print(json.dumps({k: v for k, v in result.items() if k != "samples_s"}, indent=2))


def _write_doc(r: dict[str, Any]) -> None:
    s, d, loads = r["sandgate_docker"], r["raw_docker_run"], r["load_1min"]
    median = r["ratio_median"]
    verdict = "met" if median <= TARGET else "not met"
    body = f"""
Measured {r["when"]} on {r["machine"]}; 1-minute load average {loads[0]:.1f}-{loads[1]:.1f}
during the run. {r["rounds"]} rounds, each one Sandgate create → `true` through envd over
HTTP (Docker runtime, no warm pool, one client for the run) and one raw
`docker run --rm --network none … true` of the same image, the order alternating by round.
Reproduce: `uv run python bench/docker_cold.py --rounds {r["rounds"]}`.

| (ms) | p50 | p95 | mean |
|---|---|---|---|
| Sandgate Docker: create → first command | {s["p50"]:.0f} | {s["p95"]:.0f} | {s["mean"]:.0f} |
| raw `docker run --rm … true` | {d["p50"]:.0f} | {d["p95"]:.0f} | {d["mean"]:.0f} |

Ratio per round (Sandgate / raw, the same round): median **{median:.2f}x**, quartiles
{r["ratio_q1"]:.2f}-{r["ratio_q3"]:.2f}x; {r["rounds_within_target"]} of {r["rounds"]} rounds
within {TARGET}x. Target (issue 17, point 1): Docker cold ≤ {TARGET}x raw
`docker run … true`: **{verdict}** in this run (median of the paired ratios).
"""
    write_section("Docker cold start, paired", body)


if __name__ == "__main__":
    main()
