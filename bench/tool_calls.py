"""Tool-call round trip from inside a sandbox: policy + audit (fsynced) included.

A script in the sandbox calls ``kv get`` through the generated Python client (one persistent
connection to ``/run/sandgate/gateway.sock``) and times each call; a second pass runs 4
concurrent client threads to measure throughput (the audit writer's group commit shares one
fsync among the records queued meanwhile). Baseline: the same client against a bare
JSON-lines echo on a Unix socket in the same sandbox (no gateway), so the ratio is the cost
of validate → policy → execute → audit. The figure of the previous audit writer (each caller
wrote and fsynced in its own thread), measured by this script on 2026-11-30, is shown next to
it.

Tool kinds: the same client calls an ``exec`` tool (a process per call) and a tool of an MCP
server over its long-lived stdio session (issue 14: MCP p50 within 2 ms of the exec tool).

Usage: ``uv run python bench/tool_calls.py [--calls 2000] [--kind-calls 300]
[--fsync/--no-fsync]``. Starts its own server (fresh home), writes
``bench/results/tool_calls.json`` and the "Tool calls" section of docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.fixtures.server import ServerFactory
from tests.framework.envd import create, run

from bench._report import ROOT, machine, summary_ms, write_section

CONFIG = """
agents: [{{id: bench}}]
tools:
  - {{name: kv, kind: builtin}}
  - {{name: hello, kind: exec, command: ["/bin/echo", '{{"hello": "world"}}']}}
  - {{name: mcp, kind: mcp, transport: stdio, command: ["{python}", "{mcp_server}"]}}
policy:
  rules:
    - {{id: bench-read, effect: allow, subject: {{agent: bench}}, tool: kv, action: get}}
    - {{id: bench-kinds, effect: allow, subject: {{agent: bench}}, tool: [hello, mcp_shout]}}
audit: {{fsync: {fsync}}}
"""

MCP_SERVER = ROOT / "tests" / "integration" / "tools" / "mcp_server.py"
#: The previous writer (each caller wrote and fsynced, sharing fsyncs), this script, 2026-11-30.
BEFORE = {"measured_at": "2026-11-30T00:26:33+00:00", "p50": 1.20, "calls_per_s": 872.0}

INSIDE = r"""
import json, os, socket, sys, threading, time
import sandgate_tools as tools

n = int(sys.argv[1])
mode = sys.argv[2]

def pct(xs, q):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, round(q / 100 * (len(xs) - 1)))] * 1000

CALLS = {
    "latency": lambda: tools.kv.get(key="user:1"),
    "exec": lambda: tools.call("hello", {}),
    "mcp": lambda: tools.call("mcp_shout", {"text": "hi"}),
}
if mode in CALLS:
    call = CALLS[mode]
    for _ in range(20):
        call()
    samples = []
    for _ in range(n):
        t = time.perf_counter()
        call()
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
    parser.add_argument("--kind-calls", type=int, default=300)
    parser.add_argument("--fsync", action=argparse.BooleanOptionalAction, default=True)
    args = parser.parse_args()
    factory = ServerFactory(Path(tempfile.mkdtemp(prefix="sgb-")))
    try:
        server = factory(
            config=CONFIG.format(
                fsync=str(args.fsync).lower(), python=sys.executable, mcp_server=MCP_SERVER
            )
        )
        box = create(server.url, server.api_key, metadata={"sandgate.agent": "bench"})
        sid, token = box["sandboxID"], box["envdAccessToken"]
        script = INSIDE.replace("'", "'\\''")
        results = {}
        for mode in ("baseline", "latency", "throughput", "exec", "mcp"):
            calls = args.kind_calls if mode in ("exec", "mcp") else args.calls
            out = run(server.url, sid, token, f"python3 -c '{script}' {calls} {mode}")
            if out.exit_code != 0:
                raise SystemExit(f"{mode} failed: {out.stderr}")
            results[mode] = json.loads(out.stdout.strip().splitlines()[-1])
        results["raw_fsync"] = _raw_fsync(server.home, 300)
    finally:
        factory.close()
    results["calls"] = args.calls
    results["kind_calls"] = args.kind_calls
    results["fsync"] = args.fsync
    results["before"] = BEFORE
    results["measured_at"] = datetime.now(UTC).isoformat(timespec="seconds")
    (ROOT / "bench" / "results").mkdir(exist_ok=True)
    (ROOT / "bench" / "results" / "tool_calls.json").write_text(json.dumps(results, indent=2))
    lat, base = results["latency"], results["baseline"]
    ex, mc, raw = results["exec"], results["mcp"], results["raw_fsync"]
    load = os.getloadavg()[0]
    now_row = (
        f"| async audit writer, group commit (this run) "
        f"| **{results['throughput']['calls_per_s']:.0f}** | {lat['p50']:.2f} |"
    )
    before_row = (
        "| previous writer: each caller wrote and fsynced in its own thread "
        "(5 sites on the event loop) "
        f"({BEFORE['measured_at'][:10]}, same script) "
        f"| {BEFORE['calls_per_s']:.0f} | {BEFORE['p50']:.2f} |"
    )
    ex_row = f"| `exec` (`/bin/echo`, a process per call) | {_cells(ex)} |"
    mc_row = f"| `mcp` (stdio server, one long-lived session) | {_cells(mc)} |"
    write_section(
        "Tool calls",
        f"""
Measured {results["measured_at"]} on {machine()} (1-minute load average {load:.1f} at the end),
Docker engine local. From inside a `base` sandbox, the generated Python client calls `kv get`
over `/run/sandgate/gateway.sock` (one persistent connection): canonical name → scope →
validate → policy → execute (SQLite) → redact → audit (JSONL, hash-chained, head checked
against the store's anchor, fsync={"on" if args.fsync else "off"}, plus the store index, by
the one writer thread with group commit). Baseline: the same client framing against a bare
echo on a Unix socket in the same sandbox. Reproduce:
`uv run python bench/tool_calls.py --calls {args.calls}`.

| tool call round trip (ms, n={args.calls}) | p50 | p95 | p99 |
|---|---|---|---|
| Sandgate gateway (`kv get`, audited) | {lat["p50"]:.2f} | {lat["p95"]:.2f} | {lat["p99"]:.2f} |
| echo socket baseline | {base["p50"]:.3f} | {base["p95"]:.3f} | {base["p99"]:.3f} |
| the disk alone: append a line + fsync (host, same file system) | {_cells(raw)} |

| throughput, 4 client threads in the sandbox | calls/s | `kv get` p50 (ms) |
|---|---|---|
{now_row}
{before_row}

Target (design.md §6): p50 ≤ 2 ms and ≥ 1000 calls/s on 2 cores. Numbers on this shared VM
move with its load and with its disk: a call returns once its record is fsynced, so the disk's
own fsync time (third row above, measured in this run) is the floor of the p50; the previous
figure was measured on a quieter day. Group commit shares one fsync among the records queued
while the previous one ran, so throughput is not bounded by one fsync per call.

| tool kind, same client (ms, n={args.kind_calls}) | p50 | p95 | p99 |
|---|---|---|---|
{ex_row}
{mc_row}

MCP p50 minus exec p50: **{mc["p50"] - ex["p50"]:+.2f} ms** (issue 14: within 2 ms). Before issue 14
each MCP call started its server (about 3.5 s on this machine).
""",
    )
    print(json.dumps(results, indent=2))


def _raw_fsync(home: Path, count: int) -> dict[str, float]:
    """The disk's own cost, same file system and moment: append one line and fsync it."""
    path = home / "raw-fsync.bench"
    samples = []
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    try:
        for _ in range(count):
            started = time.perf_counter()
            os.write(fd, b"x" * 400 + b"\n")
            os.fsync(fd)
            samples.append(time.perf_counter() - started)
    finally:
        os.close(fd)
        path.unlink()
    return summary_ms(samples)


def _cells(row: dict[str, float]) -> str:
    return f"{row['p50']:.2f} | {row['p95']:.2f} | {row['p99']:.2f}"


if __name__ == "__main__":
    main()
