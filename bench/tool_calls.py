"""Tool-call round trip from inside a sandbox: policy + audit (fsynced) included.

A script in the sandbox calls ``kv get`` through the generated Python client (one persistent
connection to ``/run/sandgate/gateway.sock``) and times each call; a second pass runs 4
concurrent client processes to measure throughput. Baseline: the same client against a bare
JSON-lines echo on a Unix socket in the same sandbox (no gateway), so the ratio is the cost
of validate → policy → execute → audit.

Usage: ``uv run python bench/tool_calls.py [--calls 2000] [--fsync/--no-fsync]``. Starts its
own server (fresh home), writes ``bench/results/tool_calls.json`` and the "Tool calls" section
of docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from datetime import UTC, datetime
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.fixtures.server import ServerFactory
from tests.framework.envd import create, run

from bench._report import ROOT, machine, write_section

CONFIG = """
agents: [{{id: bench}}]
tools: [{{name: kv, kind: builtin}}]
policy:
  rules:
    - {{id: bench-read, effect: allow, subject: {{agent: bench}}, tool: kv, action: get}}
audit: {{fsync: {fsync}}}
"""

INSIDE = r"""
import json, os, socket, sys, threading, time
import sandgate_tools as tools

n = int(sys.argv[1])
mode = sys.argv[2]

def pct(xs, q):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, round(q / 100 * (len(xs) - 1)))] * 1000

if mode == "latency":
    for _ in range(50):
        tools.kv.get(key="warm")
    samples = []
    for _ in range(n):
        t = time.perf_counter()
        tools.kv.get(key="user:1")
        samples.append(time.perf_counter() - t)
    print(json.dumps({"p50": pct(samples, 50), "p95": pct(samples, 95), "p99": pct(samples, 99)}))
elif mode == "throughput":
    workers = 4
    def work():
        for _ in range(n // workers):
            tools.kv.get(key="user:1")
    threads = [threading.Thread(target=work) for _ in range(workers)]
    t = time.perf_counter()
    for th in threads: th.start()
    for th in threads: th.join()
    print(json.dumps({"calls_per_s": (n // workers * workers) / (time.perf_counter() - t)}))
else:  # baseline: the same framing against an in-sandbox echo socket
    path = "/tmp/echo.sock"
    srv = socket.socket(socket.AF_UNIX); srv.bind(path); srv.listen(1)
    def echo():
        conn, _ = srv.accept(); f = conn.makefile("rb")
        for line in f:
            conn.sendall(json.dumps({"ok": True, "result": None}).encode() + b"\n")
    threading.Thread(target=echo, daemon=True).start()
    c = socket.socket(socket.AF_UNIX); c.connect(path); r = c.makefile("rb")
    samples = []
    for _ in range(n):
        t = time.perf_counter()
        request = {"tool": "kv", "arguments": {"op": "get", "key": "user:1"}}
        c.sendall(json.dumps(request).encode() + b"\n")
        json.loads(r.readline())
        samples.append(time.perf_counter() - t)
    print(json.dumps({"p50": pct(samples, 50), "p95": pct(samples, 95), "p99": pct(samples, 99)}))
"""


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--calls", type=int, default=2000)
    parser.add_argument("--fsync", action=argparse.BooleanOptionalAction, default=True)
    args = parser.parse_args()
    factory = ServerFactory(Path(tempfile.mkdtemp(prefix="sgb-")))
    try:
        server = factory(config=CONFIG.format(fsync=str(args.fsync).lower()))
        box = create(server.url, server.api_key, metadata={"sandgate.agent": "bench"})
        sid, token = box["sandboxID"], box["envdAccessToken"]
        script = INSIDE.replace("'", "'\\''")
        results = {}
        for mode in ("baseline", "latency", "throughput"):
            out = run(server.url, sid, token, f"python3 -c '{script}' {args.calls} {mode}")
            if out.exit_code != 0:
                raise SystemExit(f"{mode} failed: {out.stderr}")
            results[mode] = json.loads(out.stdout.strip().splitlines()[-1])
    finally:
        factory.close()
    results["calls"] = args.calls
    results["fsync"] = args.fsync
    results["measured_at"] = datetime.now(UTC).isoformat(timespec="seconds")
    (ROOT / "bench" / "results").mkdir(exist_ok=True)
    (ROOT / "bench" / "results" / "tool_calls.json").write_text(json.dumps(results, indent=2))
    lat, base = results["latency"], results["baseline"]
    write_section(
        "Tool calls",
        f"""
Measured {results["measured_at"]} on {machine()}, Docker engine local. From inside a `base`
sandbox, the generated Python client calls `kv get` over `/run/sandgate/gateway.sock` (one
persistent connection): canonical name → validate → policy → execute (SQLite) → redact →
audit (JSONL, hash-chained, fsync={"on" if args.fsync else "off"}, plus the store index).
Baseline: the same client framing against a bare echo on a Unix socket in the same sandbox.
Reproduce: `uv run python bench/tool_calls.py --calls {args.calls}`.

| tool call round trip (ms, n={args.calls}) | p50 | p95 | p99 |
|---|---|---|---|
| Sandgate gateway (`kv get`, audited) | {lat["p50"]:.2f} | {lat["p95"]:.2f} | {lat["p99"]:.2f} |
| echo socket baseline | {base["p50"]:.3f} | {base["p95"]:.3f} | {base["p99"]:.3f} |

Throughput, 4 client threads in the sandbox: **{results["throughput"]["calls_per_s"]:.0f}
calls/s**. Target (design.md §6): p50 ≤ 2 ms and ≥ 1000 calls/s on 2 cores.
""",
    )
    print(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
