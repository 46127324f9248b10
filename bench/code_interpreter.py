"""``run_code("1+1")``: round trip in a warm sandbox and time to first result in a fresh one,
through the official Python SDK (e2b 2.63.0 + e2b-code-interpreter 2.11.5), on each runtime.

Usage: ``uv run python bench/code_interpreter.py [--fresh 10] [--roundtrips 200]
[--runtimes bwrap,docker]`` (as root, with ``code-interpreter-v1`` built). Starts one server per
runtime (fresh homes, no warm pool), writes ``bench/results/code_interpreter.json`` and the "Code
interpreter" section of docs/benchmarks.md.

The raw baseline, in the same run and interleaved with the fresh sandboxes one for one, is the
floor of any ipykernel-based interpreter on this machine: the template's own ``python3`` loading
ipykernel's kernel application (``from ipykernel import kernelapp``) in a raw ``bwrap`` over the
same root file system tree, and in a raw ``docker run --rm --network none`` of the same image.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.fixtures.runtimes import runtime_env
from tests.fixtures.server import TEST_ROOTFS_DIR, ServerFactory

from bench._report import machine, summary_ms, write_results, write_section
from bench._workers import pinned_sdk, run_sdk_worker


def row(label: str, ms: dict[str, float]) -> str:
    return f"| {label} | {ms['p50']:.1f} | {ms['p95']:.1f} | {ms['p99']:.1f} |"


IMAGE = "sandgate/template-code-interpreter-v1:latest"
LOAD_KERNEL = ["python3", "-c", "from ipykernel import kernelapp"]


def raw_command(runtime: str) -> list[str]:
    """The raw baseline's command line on ``runtime``."""
    if runtime == "docker":
        return ["docker", "run", "--rm", "--network", "none", IMAGE, *LOAD_KERNEL]
    image_id = subprocess.run(
        ["docker", "image", "inspect", IMAGE, "--format", "{{.Id}}"],
        capture_output=True, text=True, check=True,
    ).stdout.strip().removeprefix("sha256:")  # fmt: skip
    tree = TEST_ROOTFS_DIR / image_id
    if not tree.is_dir():
        raise SystemExit(f"no root file system tree at {tree}: create one sandbox first")
    return ["bwrap", "--unshare-all", "--ro-bind", str(tree), "/", "--proc", "/proc",
            "--dev", "/dev", "--tmpfs", "/tmp", "--setenv", "HOME", "/tmp", "--",
            *LOAD_KERNEL]  # fmt: skip


def timed(command: list[str]) -> float:
    start = time.perf_counter()
    subprocess.run(command, check=True, capture_output=True, timeout=120)
    return time.perf_counter() - start


def measure(
    runtime: str, client_python: Path, fresh: int, roundtrips: int, base_dir: Path
) -> dict[str, list[float]]:
    factory = ServerFactory(base_dir / runtime)
    server = factory(extra_env={**runtime_env(runtime), "SANDGATE_TEMPLATES__WARM_POOL": "{}"})

    def run_worker(fresh_count: int, roundtrip_count: int) -> dict[str, list[float]]:
        args: list[object] = [fresh_count, roundtrip_count]
        return run_sdk_worker(client_python, "code_interpreter.py", args, server.env)

    try:
        run_worker(1, 0)  # warm-up: the root file system tree, page cache, connections
        raw = raw_command(runtime)
        timed(raw)
        samples: dict[str, list[float]] = {"create_to_first_result": [], "first_call": []}
        samples["raw"] = []
        for _ in range(fresh):
            one = run_worker(1, 0)
            samples["create_to_first_result"] += one["create_to_first_result"]
            samples["first_call"] += one["first_call"]
            samples["raw"].append(timed(raw))
        samples["roundtrip"] = run_worker(0, roundtrips)["roundtrip"]
        return samples
    finally:
        factory.close()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--fresh", type=int, default=10)
    parser.add_argument("--roundtrips", type=int, default=200)
    parser.add_argument("--runtimes", default="bwrap,docker")
    args = parser.parse_args()
    client = pinned_sdk()
    runtimes = [r.strip() for r in args.runtimes.split(",") if r.strip()]
    raw: dict[str, dict[str, list[float]]] = {}
    with tempfile.TemporaryDirectory(prefix="sgb", dir="/tmp") as base_dir:
        for runtime in runtimes:
            raw[runtime] = measure(
                runtime, client.python, args.fresh, args.roundtrips, Path(base_dir)
            )
    results = {
        "when": datetime.now(UTC).isoformat(timespec="seconds"),
        "machine": machine(),
        "load_average": Path("/proc/loadavg").read_text().split()[:3],
        "ms": {
            runtime: {key: summary_ms(samples) for key, samples in by_key.items()}
            for runtime, by_key in raw.items()
        },
    }
    write_results("code_interpreter.json", results)
    rows = []
    for runtime, ms in results["ms"].items():
        first, floor = ms["create_to_first_result"]["p50"], ms["raw"]["p50"]
        rows += [
            row(f"{runtime}: `run_code('1+1')` round trip, warm sandbox (n={args.roundtrips})",
                ms["roundtrip"]),
            row(f"{runtime}: fresh sandbox, create → first `1+1` result (n={args.fresh})",
                ms["create_to_first_result"]),
            row(f"{runtime}: fresh sandbox, first `run_code('1+1')` after create",
                ms["first_call"]),
            row(f"{runtime}: raw floor, a new sandbox loading ipykernel ({first / floor:.2f} x)",
                ms["raw"]),
        ]  # fmt: skip
    table = "\n".join(rows)
    write_section(
        "Code interpreter",
        f"""
Measured {results["when"]} on {results["machine"]}, load average
{" ".join(results["load_average"])} at the end; cold sandboxes (no warm pool). Through the official
Python SDK `e2b==2.63.0` + `e2b-code-interpreter==2.11.5` over loopback HTTP; every request goes
gateway → guest tunnel → the in-sandbox server → ipykernel. Raw floor, interleaved one for one
with the fresh sandboxes: the template's `python3` loading ipykernel's kernel application in a raw
`bwrap` over the same tree / a raw `docker run` of the same image (the ratio is Sandgate's
create → first result over it). Reproduce: `uv run python bench/code_interpreter.py`.

| measure (ms) | p50 | p95 | p99 |
|---|---|---|---|
{table}

Create returns once the server listens, and the server listens once the default Python kernel
answers, so the first call pays no kernel start. Sandboxes of `code-interpreter-v1` get 2 CPUs
(E2B sizes its own code-interpreter template so). What a cold start is made of (bwrap, quiet
machine, from the processes' start times inside one sandbox): the guest starts ~15 ms after the
create arrives, the template's start command (`bash -l`, the supervisor) ~40 ms later, the
server ~35 ms after that, and the server's first act is to start the default kernel
(`interpreter/_prestart.py`), which then loads (ipykernel and IPython less debugpy, jedi and
the terminal shell, ~0.2 s) while the server imports asyncio and jupyter_client on the other
CPU and then takes the running kernel over. The gateway sees the port open within 5 ms (the
guest waits for it). The JavaScript (Deno) kernel starts on first use and adds its own
start-up (about 1.5 s) to that first call. With `templates.warm_pool` (the code interpreter is
in it by default, min 1 / max 2) a create is served from the pool.
""",
    )
    print(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
