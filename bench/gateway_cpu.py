"""The gateway's CPU per command: this code against an earlier one, in one run.

What a sandbox's commands cost the gateway bounds how many a machine serves, and what the
gateway adds to a command's round trip is most of what Sandgate adds above the command
itself. Each round starts one server per side (this checkout's ``src``, then the earlier
tree's, or the other way round: the order alternates), creates one sandbox through the official
Python SDK and times, reading the server process's CPU time (``/proc/PID/stat``) around each
block: ``--commands`` ``commands.run("true")`` (CPU per command, and each one's round trip), and
a command printing ``--stream-mib`` MiB to stdout (CPU per MiB). The raw baseline, measured in
each sandbox: ``bash -l -c true`` run from inside (what the SDK's command is, with no gateway).

Usage: ``uv run python bench/gateway_cpu.py --previous-src DIR [--runtime bwrap] [--rounds 3]
[--commands 1000] [--stream-mib 50]``, where DIR is the ``src`` of the earlier code, e.g.
``git worktree add /tmp/prev HEAD~1`` then ``--previous-src /tmp/prev/src``. Writes
``bench/results/gateway_cpu.json`` and the "Gateway CPU per command" section of
docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.fixtures.runtimes import runtime_env
from tests.fixtures.server import ServerFactory

from bench._procmem import cpu_seconds
from bench._report import (
    add_side_arguments,
    pct,
    round_medians,
    side_head,
    side_order,
    side_sources,
    write_results,
    write_section,
)
from bench._workers import WORKERS, pinned_sdk

_COLUMNS = (
    "round", "side", "gateway CPU per command (ms)", "`commands.run` p50 (ms)",
    "floor p50 (ms)", "p50 / floor", "gateway CPU per streamed MiB (ms)",
)  # fmt: skip
_HEADER = "| " + " | ".join(_COLUMNS) + " |\n|" + "---|" * len(_COLUMNS)


def _side(
    factory: ServerFactory, python: Path, src: Path, args: argparse.Namespace
) -> dict[str, Any]:
    server = factory(
        extra_env={
            **runtime_env(args.runtime),
            "SANDGATE_TEMPLATES__WARM_POOL": "{}",
            "PYTHONPATH": str(src),  # the side's code, ahead of the installed package
        }
    )
    assert server.process is not None
    pid = server.process.pid
    worker = subprocess.Popen(
        [str(python), str(WORKERS / "e2b_gateway_cpu.py"), "base", str(args.commands),
         str(args.stream_mib)],
        env={**server.env, "PATH": "/usr/bin:/bin"},
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )  # fmt: skip
    assert worker.stdin is not None and worker.stdout is not None
    try:
        if worker.stdout.readline().strip() != "ready":
            raise SystemExit("the SDK worker did not start its sandbox")

        def block(name: str) -> tuple[dict[str, Any], float]:
            assert worker.stdin is not None and worker.stdout is not None
            before = cpu_seconds(pid)
            worker.stdin.write(name + "\n")
            worker.stdin.flush()
            reply = json.loads(worker.stdout.readline())
            return reply, cpu_seconds(pid) - before

        commands, commands_cpu = block("commands")
        _, stream_cpu = block("stream")
        floor, _ = block("floor")
        worker.stdin.close()
        worker.wait(timeout=120)
    finally:
        if worker.poll() is None:
            worker.kill()
        server.stop()
    return {
        "cpu_ms_per_command": commands_cpu * 1000 / args.commands,
        "command_p50_ms": pct(commands["samples"], 50) * 1000,
        "cpu_ms_per_stream_mib": stream_cpu * 1000 / args.stream_mib,
        "floor_p50_ms": floor["samples"][0] * 1000,
    }


def write_doc(result: dict[str, Any]) -> None:
    rows = []
    for index, rnd in enumerate(result["rounds"], 1):
        for side in rnd["order"]:
            got = rnd[side]
            rows.append(
                f"| {index} | {side} | {got['cpu_ms_per_command']:.2f} | "
                f"{got['command_p50_ms']:.2f} | {got['floor_p50_ms']:.2f} | "
                f"{got['command_p50_ms'] / got['floor_p50_ms']:.2f} x | "
                f"{got['cpu_ms_per_stream_mib']:.1f} |"
            )
    med = result["median"]
    diff = result["median_difference"]
    body = f"""Measured {result["when"]} on {result["machine"]}, {result["runtime"]} runtime,
1-minute load average {result["load"][0]:.1f}-{result["load"][1]:.1f}. Each round starts a
server per side (the order alternating), one sandbox through the official Python SDK (e2b
2.63.0), and reads the server process's CPU time around {result["commands"]}
`commands.run("true")` and around one command printing {result["stream_mib"]} MiB; the raw
baseline is `bash -l -c true` started inside the same sandbox (the command itself, with no
gateway; median of 100). "This code" is {result["this"]}, "before" is {result["previous"]}.
Reproduce: `{result["command"]}`.

{_HEADER}
{chr(10).join(rows)}

Per round, this code minus the code before (the two sides of a round run minutes apart at
most, so a round's difference is less exposed to this shared VM's drift than either figure),
median over the rounds: **{diff["cpu_ms_per_command"]:+.2f} ms of gateway CPU per command**
(medians {med["this"]["cpu_ms_per_command"]:.2f} against
{med["previous"]["cpu_ms_per_command"]:.2f}), {diff["cpu_ms_per_stream_mib"]:+.1f} ms per
streamed MiB, {diff["command_p50_ms"]:+.2f} ms of round trip p50. The CPU figure is the whole
process over the block (its background ticks and the audit writer's fsyncs included).
"""
    write_section("Gateway CPU per command", body)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_side_arguments(parser)
    parser.add_argument("--runtime", default="bwrap", choices=("bwrap", "docker"))
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--commands", type=int, default=1000)
    parser.add_argument("--stream-mib", type=int, default=50)
    parser.add_argument("--no-doc", action="store_true", help="write only the JSON results")
    args = parser.parse_args()
    sources = side_sources(parser, args)
    if args.rounds < 1 or args.commands < 50 or args.stream_mib < 1:
        parser.error("--rounds ≥ 1, --commands ≥ 50 and --stream-mib ≥ 1")
    client = pinned_sdk()
    rounds: list[dict[str, Any]] = []
    loads = [os.getloadavg()[0]]
    with tempfile.TemporaryDirectory(prefix="sgc", dir="/tmp") as base_dir:
        factory = ServerFactory(Path(base_dir))
        try:
            for index in range(args.rounds):
                order = side_order(index)
                rnd: dict[str, Any] = {"order": order}
                for side in order:
                    rnd[side] = _side(factory, client.python, sources[side], args)
                    print(index + 1, side, json.dumps(rnd[side]), flush=True)
                rounds.append(rnd)
                loads.append(os.getloadavg()[0])
        finally:
            factory.close()
    median, difference = round_medians(rounds, sources)
    command = (
        f"uv run python bench/gateway_cpu.py --previous-src DIR --runtime {args.runtime} "
        f"--rounds {args.rounds} --commands {args.commands} --stream-mib {args.stream_mib}"
    )
    result = {
        **side_head(args, loads),
        "runtime": args.runtime,
        "commands": args.commands,
        "stream_mib": args.stream_mib,
        "command": command,
        "rounds": rounds,
        "median": median,
        "median_difference": difference,
    }
    write_results("gateway_cpu.json", result)
    if not args.no_doc:
        write_doc(result)


if __name__ == "__main__":
    main()
