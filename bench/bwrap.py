"""Runtimes side by side: cold create → first command on bwrap and on Docker, and the idle memory
of one sandbox on each, next to raw ``bwrap`` / ``docker run`` measured in the same run.

Usage: ``uv run python bench/bwrap.py [--creates 20] [--idle 5]`` (as root, with Docker and the
``base`` template built). Starts one server per runtime (fresh homes), drives them over HTTP with
the test suite's small envd client (no SDK overhead, no warm pool), writes
``bench/results/bwrap.json`` and the "Runtimes" section of docs/benchmarks.md.

Idle memory is read after the guest has settled: the sandbox's memory cgroup usage (includes its
tmpfs pages and page cache charged to it) and the summed PSS of its processes (for bwrap this
includes bubblewrap's monitor outside the sandbox; Docker's containerd-shim is not counted).
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

import httpx
from tests.fixtures.runtimes import BWRAP_ROOTFS_DIR, RuntimeView, runtime_env
from tests.fixtures.server import ServerFactory
from tests.framework.envd import create, run

from bench._report import ROOT, machine, summary_ms, write_section

IMAGE = "sandgate/template-base:latest"
DOCKER_RUN = ["docker", "run", "--rm", "--network", "none", IMAGE, "true"]


def timed(argv: list[str]) -> float:
    start = time.perf_counter()
    subprocess.run(argv, check=True, capture_output=True)
    return time.perf_counter() - start


def raw_bwrap_argv(*command: str) -> list[str]:
    rootfs = next(p for p in BWRAP_ROOTFS_DIR.iterdir() if p.is_dir() and len(p.name) == 64)
    return ["bwrap", "--unshare-all", "--ro-bind", str(rootfs), "/", "--proc", "/proc",
            "--dev", "/dev", "--", *command]  # fmt: skip


def cgroup_memory(pid: int) -> tuple[int, list[int]]:
    """(memory cgroup usage in bytes, pids in that cgroup) of ``pid``."""
    for line in Path(f"/proc/{pid}/cgroup").read_text().splitlines():
        _, controllers, path = line.split(":", 2)
        if "memory" in controllers.split(","):
            base = Path("/sys/fs/cgroup/memory") / path.lstrip("/")
            usage = int((base / "memory.usage_in_bytes").read_text())
            return usage, [int(p) for p in (base / "cgroup.procs").read_text().split()]
        if controllers == "":
            base = Path("/sys/fs/cgroup") / path.lstrip("/")
            if (base / "memory.current").exists():
                usage = int((base / "memory.current").read_text())
                return usage, [int(p) for p in (base / "cgroup.procs").read_text().split()]
    raise RuntimeError(f"no memory cgroup for {pid}")


def pss(pid: int) -> int:
    for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
        if line.startswith("Pss:"):
            return int(line.split()[1]) * 1024
    return 0


def measure(kind: str, creates: int, idle: int) -> dict[str, object]:
    with tempfile.TemporaryDirectory(prefix="sgb-") as base_dir:
        factory = ServerFactory(Path(base_dir))
        try:
            server = factory(extra_env=runtime_env(kind))
            view = RuntimeView(kind, server)
            headers = {"X-API-Key": server.api_key}
            warm = create(server.url, server.api_key)  # the first create exports the rootfs
            httpx.delete(f"{server.url}/sandboxes/{warm['sandboxID']}", headers=headers)
            samples: list[float] = []
            for _ in range(creates):
                start = time.perf_counter()
                sandbox = create(server.url, server.api_key)
                result = run(server.url, sandbox["sandboxID"], sandbox["envdAccessToken"], "true")
                samples.append(time.perf_counter() - start)
                assert result.exit_code == 0
                httpx.delete(f"{server.url}/sandboxes/{sandbox['sandboxID']}", headers=headers)
            kept = [create(server.url, server.api_key) for _ in range(idle)]
            for sandbox in kept:
                run(server.url, sandbox["sandboxID"], sandbox["envdAccessToken"], "true")
            time.sleep(2.0)  # let the guests settle before reading idle memory (not a sync)
            usage, rss = [], []
            for sandbox in kept:
                init = view.init_pid(sandbox["sandboxID"])
                bytes_used, pids = cgroup_memory(init)
                state = view.state(sandbox["sandboxID"]) or {}
                extra = [int(state["monitor_pid"])] if "monitor_pid" in state else []
                usage.append(bytes_used)
                rss.append(sum(pss(p) for p in {*pids, *extra}))
            for sandbox in kept:
                httpx.delete(f"{server.url}/sandboxes/{sandbox['sandboxID']}", headers=headers)
        finally:
            factory.close()
    mib = 1024 * 1024
    return {
        "create_first_command": summary_ms(samples),
        "idle_cgroup_mib": sum(usage) / len(usage) / mib,
        "idle_pss_mib": sum(rss) / len(rss) / mib,
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--creates", type=int, default=20)
    parser.add_argument("--idle", type=int, default=5)
    args = parser.parse_args()

    results = {kind: measure(kind, args.creates, args.idle) for kind in ("bwrap", "docker")}
    raw = {
        "bwrap": summary_ms([timed(raw_bwrap_argv("/bin/true")) for _ in range(args.creates)]),
        "bwrap python": summary_ms(
            [timed(raw_bwrap_argv("python3", "-I", "-c", "pass")) for _ in range(args.creates)]
        ),
        "docker run": summary_ms([timed(DOCKER_RUN) for _ in range(args.creates)]),
    }
    out = {"when": datetime.now(UTC).isoformat(), "machine": machine(), "runtimes": results,
           "raw": raw, "creates": args.creates, "idle": args.idle}  # fmt: skip
    (ROOT / "bench" / "results").mkdir(exist_ok=True)
    (ROOT / "bench" / "results" / "bwrap.json").write_text(json.dumps(out, indent=2))

    def line(label: str, s: dict[str, float], target: str) -> str:
        return f"| {label} | {s['p50']:.0f} | {s['p95']:.0f} | {s['p99']:.0f} | {target} |"

    bw, dk = results["bwrap"], results["docker"]
    body = f"""
Machine: {machine()}; {args.creates} sequential cold creates per runtime (no warm pool), each
followed by `true` through envd over HTTP (`uv run python bench/bwrap.py`).

| create → first command done (ms) | p50 | p95 | p99 | target p50 |
|---|---|---|---|---|
{line("bwrap runtime", bw["create_first_command"], "≤ 60")}  # type: ignore[arg-type]
{line("docker runtime", dk["create_first_command"], "≤ 400")}  # type: ignore[arg-type]
{line("raw `bwrap --unshare-all … true`", raw["bwrap"], "baseline")}
{line("raw `bwrap --unshare-all … python3 -I -c pass`", raw["bwrap python"], "baseline")}
{line("raw `docker run --rm … true`", raw["docker run"], "baseline")}

The bwrap runtime's own work (rootfs lookup, uid map, nested-userns lock, cgroup, launch) is
about 40-60 ms of `runtime.create`; the rest is the guest daemon's Python start-up inside the
sandbox (see the raw `python3 -c pass` row: the interpreter alone, before the guest imports
asyncio from a zipapp without bytecode). The 60 ms target is **not met**; it needs a faster
guest start (precompiled bytecode in `guest.pyz`, fewer imports) or the warm pool.

| idle sandbox ({args.idle} kept, mean) | memory cgroup (MiB) | PSS of processes (MiB) | target |
|---|---|---|---|
| bwrap | {bw["idle_cgroup_mib"]:.1f} | {bw["idle_pss_mib"]:.1f} | ≤ 10 |
| docker | {dk["idle_cgroup_mib"]:.1f} | {dk["idle_pss_mib"]:.1f} | ≤ 10 |
"""
    write_section("Runtimes", body.replace("  # type: ignore[arg-type]", ""))
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
