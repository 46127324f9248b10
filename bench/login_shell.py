"""The login shell of every ``commands.run``: the template's /etc/profile against Debian's.

E2B's SDKs run each command as ``/bin/bash -l -c <cmd>``, so every command pays the login
profile. Debian's /etc/profile forks ``id -u`` to choose PATH; the shipped ``base`` template
asks bash for ``$EUID`` instead (images/base/Dockerfile). Paired in one sandbox per runtime:
blocks of ``commands.run("true")`` through the official Python SDK alternate between the two
profiles (the order alternating by round), so both see the same moment of a shared machine;
each block also times ``bash -l -c true`` inside the sandbox (the login shell alone).

Usage: ``uv run python bench/login_shell.py [--rounds 8] [--per-block 60]`` (as root, with
Docker, bwrap and the ``base`` template built). Writes ``bench/results/login_shell.json`` and
the "Login shell" section of docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.fixtures.runtimes import runtime_env
from tests.fixtures.server import ServerFactory

from bench._report import machine, summary_ms, write_results, write_section
from bench._workers import pinned_sdk, run_sdk_worker

RUNTIMES = ("bwrap", "docker")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=8)
    parser.add_argument("--per-block", type=int, default=60)
    args = parser.parse_args()
    if args.rounds < 2 or args.per_block < 10:
        parser.error("--rounds must be at least 2 and --per-block at least 10")
    client = pinned_sdk()
    results: dict[str, Any] = {}
    loads: list[float] = []
    with tempfile.TemporaryDirectory(prefix="sgb", dir="/tmp") as base_dir:
        factory = ServerFactory(Path(base_dir))
        try:
            for runtime in RUNTIMES:
                server = factory(
                    extra_env={**runtime_env(runtime), "SANDGATE_TEMPLATES__WARM_POOL": "{}"}
                )
                raw = run_sdk_worker(
                    client.python,
                    "e2b_login_shell.py",
                    [args.rounds, args.per_block, "base"],
                    server.env,
                )
                loads.append(os.getloadavg()[0])
                results[runtime] = {
                    "sdk": {k: summary_ms(v) for k, v in raw["sdk"].items()},
                    "inside_p50_ms": {
                        k: statistics.median(v) * 1000 for k, v in raw["inside"].items()
                    },
                }
        finally:
            factory.close()
    result = {
        "when": datetime.now(UTC).isoformat(timespec="seconds"),
        "machine": machine(),
        "rounds": args.rounds,
        "per_block": args.per_block,
        "load_1min": [min(loads), max(loads)],
        "runtimes": results,
    }
    write_results("login_shell.json", result)
    _write_doc(result)
    print(json.dumps(result, indent=2))


def _write_doc(r: dict[str, Any]) -> None:
    rows = []
    for runtime, data in r["runtimes"].items():
        sdk, inside = data["sdk"], data["inside_p50_ms"]
        saved = sdk["debian"]["p50"] - sdk["shipped"]["p50"]
        rows.append(
            f"| {runtime} | {sdk['debian']['p50']:.2f} / {sdk['debian']['p95']:.2f} "
            f"| {sdk['shipped']['p50']:.2f} / {sdk['shipped']['p95']:.2f} | {saved:.2f} "
            f"| {inside['debian']:.2f} → {inside['shipped']:.2f} |"
        )
    n = r["rounds"] * r["per_block"]
    header = " | ".join(
        [
            "| runtime",
            f"Debian's profile: p50 / p95 (ms, n={n})",
            "the template's: p50 / p95",
            "p50 saved (ms)",
            "`bash -l -c true` inside, p50 (ms) |",
        ]
    )
    loads = r["load_1min"]
    body = f"""
Measured {r["when"]} on {r["machine"]}; 1-minute load average {loads[0]:.1f}-{loads[1]:.1f}
at the end of each runtime's part. One `base` sandbox per runtime, the official Python SDK
(e2b 2.63.0); {r["rounds"]} rounds of two blocks of {r["per_block"]} `commands.run("true")`,
one block with Debian's /etc/profile (it forks `id -u` to choose PATH) and one with the
template's (bash's `$EUID`, images/base/Dockerfile), the order alternating by round; after
each block, the median of 50 `bash -l -c true` started inside the sandbox (no transport).
Reproduce: `uv run python bench/login_shell.py --rounds {r["rounds"]} --per-block {r["per_block"]}`.

{header}
|---|---|---|---|---|
{chr(10).join(rows)}

E2B's SDKs run every command as `/bin/bash -l -c <cmd>`: every `commands.run` paid that
`id -u` (a fork and an exec) before its own command. `sh -l` (dash has no `$EUID`) still asks
`id -u`; PATH is the same either way (checked for `user` and `root`, bash and sh). Bash takes
an `EUID` passed in the environment over its own: such a command gets the other PATH, nothing
more (the profile uses the uid for nothing else).
For issue 17's point 5 (`commands.run('true')` ≤ 5 ms p50 on a quiet machine; 7.6-8.2 ms
before this): the floor the peers run measures (`bash -l -c true` in a shell held open over
the same image, 4.7 ms) was mostly this fork; `bench/peers.py` measures both again.
"""
    write_section("Login shell", body)


if __name__ == "__main__":
    main()
