"""The data plane through the official Python SDK (e2b 2.63.0): ``commands.run("true")``
round trip, a command's stdout streaming throughput, and 100 MiB upload/download, each next to
``docker exec`` / ``docker cp`` on a container of the same image measured in the same run.

Usage: ``uv run python bench/data_plane.py [--roundtrips 300] [--stream-mib 100]
[--transfer-mib 100] [--repeats 3]``. Starts its own server (fresh home, same Docker engine),
writes ``bench/results/data_plane.json`` and the "Data plane" section of docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.fixtures.server import ServerFactory

from bench._report import machine, summary_ms, timed, write_results, write_section
from bench._workers import pinned_sdk, run_sdk_worker

IMAGE = "sandgate/template-base:latest"
MiB = 1024 * 1024


def docker_baseline(roundtrips: int, stream_mib: int, transfer_mib: int, repeats: int) -> dict:
    name = f"sandgate-bench-dp-{int(time.time())}"
    subprocess.run(
        [
            "docker",
            "run",
            "-d",
            "--rm",
            "--name",
            name,
            "--network",
            "none",
            IMAGE,
            "sleep",
            "1800",
        ],
        check=True,
        capture_output=True,
    )
    try:
        for _ in range(10):
            timed(["docker", "exec", name, "true"])
        exec_rt = [timed(["docker", "exec", name, "true"]) for _ in range(roundtrips)]
        stream = [
            timed(["docker", "exec", name, "head", "-c", f"{stream_mib}M", "/dev/zero"])
            for _ in range(repeats)
        ]
        with tempfile.TemporaryDirectory(prefix="sgb-dp") as tmp:
            source = Path(tmp) / "bench.bin"
            source.write_bytes(os.urandom(transfer_mib * MiB))
            back = Path(tmp) / "back.bin"
            cp_in, cp_out = [], []
            for _ in range(repeats):
                cp_in.append(timed(["docker", "cp", str(source), f"{name}:/tmp/bench.bin"]))
                back.unlink(missing_ok=True)
                cp_out.append(timed(["docker", "cp", f"{name}:/tmp/bench.bin", str(back)]))
    finally:
        subprocess.run(["docker", "rm", "-f", name], capture_output=True)
    return {"roundtrip": exec_rt, "stream": stream, "upload": cp_in, "download": cp_out}


def mib_s(size_mib: int, seconds: list[float]) -> float:
    return size_mib / statistics.median(seconds)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--roundtrips", type=int, default=300)
    parser.add_argument("--stream-mib", type=int, default=100)
    parser.add_argument("--transfer-mib", type=int, default=100)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()

    client = pinned_sdk()
    with tempfile.TemporaryDirectory(prefix="sgb", dir="/tmp") as base_dir:
        factory = ServerFactory(Path(base_dir))
        server = factory(extra_env={"SANDGATE_TEMPLATES__BUILD_ON_START": "false"})
        try:
            ours = run_sdk_worker(
                client.python,
                "e2b_data_plane.py",
                [args.roundtrips, args.stream_mib, args.transfer_mib, args.repeats, "base"],
                server.env,
            )
        finally:
            factory.close()
    base = docker_baseline(args.roundtrips, args.stream_mib, args.transfer_mib, args.repeats)

    rt, brt = summary_ms(ours["roundtrip"]), summary_ms(base["roundtrip"])
    rates = {
        kind: {
            "sandgate": mib_s(size, ours[kind]),
            "docker": mib_s(size, base[kind]),
        }
        for kind, size in (
            ("stream", args.stream_mib),
            ("upload", args.transfer_mib),
            ("download", args.transfer_mib),
        )
    }
    results = {
        "when": datetime.now(UTC).isoformat(timespec="seconds"),
        "machine": machine(),
        "load_average_1m": os.getloadavg()[0],
        "roundtrip_ms": {"sandgate": rt, "docker exec": brt},
        "mib_per_s": rates,
        "raw_seconds": {"sandgate": ours, "docker": base},
    }
    write_results("data_plane.json", results)

    def rate_row(label: str, kind: str, baseline: str) -> str:
        r = rates[kind]
        return (
            f"| {label} | {r['sandgate']:.0f} | {r['docker']:.0f} ({baseline}) | "
            f"{r['sandgate'] / r['docker']:.2f}x |"
        )

    write_section(
        "Data plane",
        f"""
Measured {results["when"]} on {results["machine"]} (1-minute load average
{results["load_average_1m"]:.1f} at the end, the benchmark itself included), Docker engine
local. Sandgate numbers go through the official Python SDK `e2b==2.63.0` over loopback HTTP
(one sandbox, warmed up); the baseline is the raw Docker CLI against a container of the same
image in the same run.
Reproduce: `uv run python bench/data_plane.py`.

| `commands.run("true")` round trip (ms, n={args.roundtrips}) | p50 | p95 | p99 |
|---|---|---|---|
| Sandgate (SDK) | {rt["p50"]:.1f} | {rt["p95"]:.1f} | {rt["p99"]:.1f} |
| `docker exec <c> true` | {brt["p50"]:.1f} | {brt["p95"]:.1f} | {brt["p99"]:.1f} |

| throughput (MiB/s, median of {args.repeats}) | Sandgate (SDK) | raw Docker | ratio |
|---|---|---|---|
{rate_row(f"command stdout, `head -c {args.stream_mib}M /dev/zero`", "stream", "docker exec")}
{rate_row(f"upload {args.transfer_mib} MiB (`files.write`)", "upload", "docker cp in")}
{rate_row(f"download {args.transfer_mib} MiB (`files.read`)", "download", "docker cp out")}

Target (design.md §6): `commands.run("true")` p50 ≤ 5 ms on loopback. Streaming goes through
the SDK's callback (base64 in JSON envelopes, decoded to text); `docker exec` writes raw bytes
to a pipe. `docker cp` includes the CLI's tar packing.
""",
    )
    print(json.dumps({k: v for k, v in results.items() if k != "raw_seconds"}, indent=2))


if __name__ == "__main__":
    main()
