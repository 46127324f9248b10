"""Snapshots, forks and pause to disk on both runtimes, next to a cold create and a raw ``tar`` of
the same layer measured in the same run.

Usage: ``uv run python bench/snapshots.py [--n 10] [--mib 64]`` (as root, with Docker and the
``base`` template built). Starts one server per runtime (fresh homes), drives it over HTTP with
the test suite's small envd client (no SDK overhead), writes ``bench/results/snapshots.json``
and the "Snapshots, forks, pause to disk" section of docs/benchmarks.md.

What each row times (wall clock at the client, loopback):

* cold create → first command: ``POST /v2/sandboxes`` then ``echo`` through envd;
* snapshot: ``POST /sandboxes/{id}/snapshots`` of a running sandbox (frozen for the copy, thawed
  after), with an empty layer, with ``--mib`` MiB of random data written, and with 5000 small
  files (per-file costs);
* create from snapshot → first command: a sandbox made from the ``--mib`` snapshot, and from
  the 5000-file one;
* fork → first command: ``POST /sandboxes/{id}/fork`` (``count`` 1; and 4, until all four
  answered) of the ``--mib`` sandbox;
* pause to disk / resume → first command: ``pause {"memory": false}``, then ``connect``;
* raw baseline: ``tar -cf`` of the same sandbox's layer directory to a file on the same disk
  and ``fsync``, the least a save can cost.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import httpx
from tests.fixtures.runtimes import runtime_env
from tests.fixtures.server import RunningServer, ServerFactory
from tests.framework.envd import create, run

from bench._report import ROOT, machine, summary_ms, write_section

STAGE = Path("/run/sandgate-rt/stage")
#: Files in the "many small files" layer (a package install's worth).
FILES = 5000


def clock(action: Callable[[], Any]) -> tuple[float, Any]:
    start = time.perf_counter()
    value = action()
    return time.perf_counter() - start, value


class Bench:
    def __init__(self, server: RunningServer) -> None:
        self.server = server
        self.http = httpx.Client(
            base_url=server.url, headers={"X-API-Key": server.api_key}, timeout=300
        )
        self.made: list[str] = []
        self.snapshots: list[str] = []

    def create(self, **body: Any) -> dict[str, Any]:
        created = create(self.server.url, self.server.api_key, client=self.http, **body)
        self.made.append(created["sandboxID"])
        return created

    def first_command(self, sandbox: dict[str, Any]) -> None:
        out = run(
            self.server.url, sandbox["sandboxID"], sandbox["envdAccessToken"], "echo ok",
            client=self.http,
        )  # fmt: skip
        if out.stdout != "ok\n":
            raise RuntimeError(f"first command: {out}")

    def post(self, path: str, body: Any, status: int) -> Any:
        response = self.http.post(path, json=body)
        if response.status_code != status:
            raise RuntimeError(f"{path}: {response.status_code} {response.text}")
        return response.json() if response.content else None

    def snapshot(self, sandbox_id: str) -> str:
        snapshot_id: str = self.post(f"/sandboxes/{sandbox_id}/snapshots", {}, 201)["snapshotID"]
        self.snapshots.append(snapshot_id)
        return snapshot_id

    def close(self) -> None:
        for snapshot_id in self.snapshots:
            self.http.delete(f"/templates/{snapshot_id}")
        for sandbox_id in self.made:
            self.http.delete(f"/sandboxes/{sandbox_id}")
        self.http.close()


def raw_tar(sandbox_id: str, target_dir: Path) -> float:
    upper = STAGE / sandbox_id / "disk" / "upper"
    target = target_dir / f"raw-{time.monotonic_ns()}.tar"
    start = time.perf_counter()
    subprocess.run(["tar", "--xattrs", "-cf", str(target), "-C", str(upper), "."], check=True)
    with open(target, "rb") as file:
        os.fsync(file.fileno())
    elapsed = time.perf_counter() - start
    target.unlink()
    return elapsed


def measure(kind: str, n: int, mib: int) -> dict[str, Any]:
    samples: dict[str, list[float]] = {}

    def add(name: str, value: float) -> None:
        samples.setdefault(name, []).append(value)

    with tempfile.TemporaryDirectory(prefix="sgb-", dir="/var/tmp") as base_dir:
        factory = ServerFactory(Path(base_dir))
        env = {**runtime_env(kind), "SANDGATE_LIMITS__MAX_SANDBOXES_PER_TEAM": "100"}
        server = factory(extra_env=env)
        bench = Bench(server)
        try:
            warm = bench.create(timeout=600)  # first create pays the tree export: not counted
            bench.first_command(warm)
            for _ in range(n):
                elapsed, created = clock(lambda: bench.create(timeout=600))
                first, _ = clock(lambda created=created: bench.first_command(created))
                add("cold create → first command", elapsed + first)
                add(
                    "snapshot, empty layer",
                    clock(lambda c=created: bench.snapshot(c["sandboxID"]))[0],
                )
                bench.http.delete(f"/sandboxes/{created['sandboxID']}")

            big = bench.create(timeout=3600)
            filled = run(
                server.url, big["sandboxID"], big["envdAccessToken"],
                f"head -c {mib}M /dev/urandom > /home/user/blob", client=bench.http,
            )  # fmt: skip
            if filled.exit_code != 0:
                raise RuntimeError(filled)
            saved = ""
            for _ in range(n):
                add(
                    f"raw tar of the same {mib} MiB layer",
                    raw_tar(big["sandboxID"], Path(base_dir)),
                )
                elapsed, saved = clock(lambda: bench.snapshot(big["sandboxID"]))
                add(f"snapshot, {mib} MiB layer", elapsed)
            for _ in range(n):
                elapsed, restored = clock(lambda: bench.create(templateID=saved, timeout=600))
                first, _ = clock(lambda r=restored: bench.first_command(r))
                add(f"create from the {mib} MiB snapshot → first command", elapsed + first)
                bench.http.delete(f"/sandboxes/{restored['sandboxID']}")
            many = bench.create(timeout=3600)
            filled = run(
                server.url, many["sandboxID"], many["envdAccessToken"],
                "mkdir /home/user/many && cd /home/user/many && "
                f"python3 -c \"[open(f'f{{i}}', 'w').write('x' * 100) for i in range({FILES})]\"",
                client=bench.http,
            )  # fmt: skip
            if filled.exit_code != 0:
                raise RuntimeError(filled)
            saved_many = ""
            for _ in range(n):
                elapsed, saved_many = clock(lambda: bench.snapshot(many["sandboxID"]))
                add(f"snapshot, {FILES} small files", elapsed)
            for _ in range(n):
                elapsed, restored = clock(lambda: bench.create(templateID=saved_many, timeout=600))
                first, _ = clock(lambda r=restored: bench.first_command(r))
                add(f"create from the {FILES}-file snapshot → first command", elapsed + first)
                bench.http.delete(f"/sandboxes/{restored['sandboxID']}")
            bench.http.delete(f"/sandboxes/{many['sandboxID']}")
            for _ in range(n):

                def fork_one() -> None:
                    forks = bench.post(
                        f"/sandboxes/{big['sandboxID']}/fork", {"count": 1, "timeout": 600}, 201
                    )
                    sandbox = forks[0]["sandbox"]
                    bench.made.append(sandbox["sandboxID"])
                    bench.first_command(sandbox)
                    bench.http.delete(f"/sandboxes/{sandbox['sandboxID']}")

                add(f"fork ({mib} MiB), count 1 → first command", clock(fork_one)[0])
            for _ in range(max(2, n // 3)):

                def fork_four() -> None:
                    forks = bench.post(
                        f"/sandboxes/{big['sandboxID']}/fork", {"count": 4, "timeout": 600}, 201
                    )
                    sandboxes = [entry["sandbox"] for entry in forks]
                    bench.made.extend(s["sandboxID"] for s in sandboxes)
                    with ThreadPoolExecutor(4) as pool:
                        list(pool.map(bench.first_command, sandboxes))
                    for sandbox in sandboxes:
                        bench.http.delete(f"/sandboxes/{sandbox['sandboxID']}")

                add(f"fork ({mib} MiB), count 4 → all four answer", clock(fork_four)[0])
            for _ in range(n):
                elapsed, _ = clock(
                    lambda: bench.post(
                        f"/sandboxes/{big['sandboxID']}/pause", {"memory": False}, 204
                    )
                )
                add(f"pause to disk ({mib} MiB)", elapsed)
                elapsed, _ = clock(
                    lambda: bench.post(
                        f"/v2/sandboxes/{big['sandboxID']}/connect", {"timeout": 3600}, 201
                    )
                )
                first, _ = clock(lambda: bench.first_command(big))
                add(f"resume from disk ({mib} MiB) → first command", elapsed + first)
        finally:
            bench.close()
            factory.close()
    return {name: summary_ms(values) | {"n": len(values)} for name, values in samples.items()}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--n", type=int, default=10)
    parser.add_argument("--mib", type=int, default=64)
    args = parser.parse_args()
    results: dict[str, Any] = {
        "when": datetime.now(UTC).isoformat(timespec="seconds"),
        "machine": machine(),
        "mib": args.mib,
    }
    for kind in ("bwrap", "docker"):
        results[kind] = measure(kind, args.n, args.mib)
    out = ROOT / "bench" / "results" / "snapshots.json"
    out.write_text(json.dumps(results, indent=2) + "\n")

    names = list(results["bwrap"])
    cold = "cold create → first command"
    rows = []
    for name in names:
        cells = []
        for kind in ("bwrap", "docker"):
            m = results[kind][name]
            ratio = m["p50"] / results[kind][cold]["p50"]
            cells.append(f"{m['p50']:.0f} / {m['p95']:.0f} ({ratio:.2f}x)")
        rows.append(f"| {name} (n={results['bwrap'][name]['n']}) | {cells[0]} | {cells[1]} |")
    raw = f"raw tar of the same {args.mib} MiB layer"
    snap = f"snapshot, {args.mib} MiB layer"
    vs_raw = " / ".join(
        f"{kind} {results[kind][snap]['p50'] / results[kind][raw]['p50']:.2f}x"
        for kind in ("bwrap", "docker")
    )
    table = "\n".join(rows)
    load = os.getloadavg()[0]
    write_section(
        "Snapshots, forks, pause to disk",
        f"""
Measured {results["when"]} on {results["machine"]} (1-minute load average {load:.1f} at the
end, other work on the machine included), Docker engine local, cold sandboxes (no warm pool).
Raw HTTP over loopback with the test suite's envd client (no SDK overhead), one server per
runtime. Ratios are to the same runtime's cold create → first command in the same
run; the `{args.mib} MiB` rows use a sandbox that wrote {args.mib} MiB of random data.
Reproduce: `uv run python bench/snapshots.py --n {args.n} --mib {args.mib}`.

| measure (ms, p50 / p95, ratio to cold create p50) | bwrap | Docker |
|---|---|---|
{table}

A snapshot of the {args.mib} MiB layer against a raw `tar --xattrs -cf` + `fsync` of the same
directory in the same run (p50): {vs_raw}. Each file also costs a header that Python's
`tarfile` builds and parses (file data moves with `sendfile` on restore): the {FILES}-file rows
show that per-file cost, so a layer of many small files (a large `pip install`) takes longer
than its bytes suggest. A save freezes the sandbox for the copy; restores,
forks and resumes from disk are a cold create plus writing the layer into the new sandbox's
disk before it starts (processes are not saved: each boots fresh). Forks of one call share one
capture and boot at most four at a time.
""",
    )
    print(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
