"""WebSocket echo round trip through Sandgate's port routing, next to a direct connection.

Through routing: client → gateway (uvicorn, WebSocket) → relay → guest tunnel → the echo
service inside a ``base`` sandbox (``websockets``, copied in). Direct: the same client and the
same echo service script on the host's loopback, measured in the same run. Both use one
connection, warmed up; small text messages for latency, 1 MiB binary messages for throughput.

Usage: ``uv run python bench/websocket_routing.py [--roundtrips 1000] [--mib 50]``. Starts its
own server (fresh home, same Docker engine), writes ``bench/results/websocket_routing.json``
and the "WebSocket routing" section of docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.fixtures.server import ServerFactory, free_port
from tests.framework.sandbox_http import SandboxHttp, wait_for
from tests.framework.ws_service import routing_headers, server_source, start_ws_service, ws_url
from websockets.sync.client import ClientConnection, connect

from bench._report import machine, summary_ms, write_results, write_section

MiB = 1024 * 1024
WARMUP = 50


def measure(ws: ClientConnection, roundtrips: int, mib: int) -> dict[str, list[float]]:
    message = "x" * 32
    for _ in range(WARMUP):
        ws.send(message)
        ws.recv(timeout=30)
    small = []
    for _ in range(roundtrips):
        start = time.perf_counter()
        ws.send(message)
        ws.recv(timeout=30)
        small.append(time.perf_counter() - start)
    block = os.urandom(MiB)
    big = []
    for _ in range(mib):
        start = time.perf_counter()
        ws.send(block)
        ws.recv(timeout=60)
        big.append(time.perf_counter() - start)
    return {"small": small, "mib": big}


def direct(roundtrips: int, mib: int) -> dict[str, list[float]]:
    port = free_port()
    with tempfile.TemporaryDirectory(prefix="sgb-ws") as tmp:
        script = Path(tmp) / "ws_server.py"
        script.write_text(server_source(port))
        proc = subprocess.Popen([sys.executable, str(script)])
        try:

            def listening() -> bool:
                with socket.socket() as sock:
                    return sock.connect_ex(("127.0.0.1", port)) == 0

            wait_for(listening, 30, "the direct echo service")
            with connect(f"ws://127.0.0.1:{port}/echo", max_size=None, compression=None) as ws:
                return measure(ws, roundtrips, mib)
        finally:
            proc.terminate()
            proc.wait(timeout=10)


def routed(roundtrips: int, mib: int) -> dict[str, list[float]]:
    with tempfile.TemporaryDirectory(prefix="sgb", dir="/tmp") as base_dir:
        factory = ServerFactory(Path(base_dir))
        server = factory(extra_env={"SANDGATE_TEMPLATES__BUILD_ON_START": "false"})
        try:
            import httpx

            created = httpx.post(
                f"{server.url}/v2/sandboxes",
                json={"templateID": "base", "timeout": 1800},
                headers={"X-API-Key": server.api_key},
                timeout=120,
            ).json()
            sandbox = SandboxHttp(
                server.url, server.api_key, created["sandboxID"], created["envdAccessToken"]
            )
            start_ws_service(sandbox)
            headers = {
                **routing_headers(sandbox),
                "E2B-Traffic-Access-Token": created["trafficAccessToken"],
            }
            with connect(
                ws_url(server.url, "/echo"),
                additional_headers=headers,
                max_size=None,
                compression=None,
            ) as ws:
                return measure(ws, roundtrips, mib)
        finally:
            factory.close()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--roundtrips", type=int, default=1000)
    parser.add_argument("--mib", type=int, default=50)
    args = parser.parse_args()
    ours = routed(args.roundtrips, args.mib)
    base = direct(args.roundtrips, args.mib)
    small = {"sandgate": summary_ms(ours["small"]), "direct": summary_ms(base["small"])}
    big = {"sandgate": summary_ms(ours["mib"]), "direct": summary_ms(base["mib"])}
    results = {
        "when": datetime.now(UTC).isoformat(timespec="seconds"),
        "machine": machine(),
        "load_average_1m": os.getloadavg()[0],
        "small_message_ms": small,
        "one_mib_message_ms": big,
        "raw_seconds": {"sandgate": ours, "direct": base},
    }
    write_results("websocket_routing.json", results)

    def row(label: str, summary: dict[str, float]) -> str:
        return f"| {label} | {summary['p50']:.2f} | {summary['p95']:.2f} | {summary['p99']:.2f} |"

    ratio = small["sandgate"]["p50"] / small["direct"]["p50"]
    mib_rate = {k: 1000 / v["p50"] for k, v in big.items()}
    write_section(
        "WebSocket routing",
        f"""
Measured {results["when"]} on {results["machine"]} (1-minute load average
{results["load_average_1m"]:.1f} at the end), Docker engine local. One WebSocket, warmed up
({WARMUP} messages), echoing. **Through routing**: `ws://127.0.0.1:<port>/echo` with the
`E2b-Sandbox-Id`/`-Port` headers and the traffic token → gateway (uvicorn) → relay
(`api/ws_relay.py`) → guest tunnel → a `websockets` echo service inside a `base` sandbox.
**Direct**: the same client and the same echo service script on the host's loopback, same run.
Reproduce: `uv run python bench/websocket_routing.py`.

| echo round trip, 32-byte text (ms, n={args.roundtrips}) | p50 | p95 | p99 |
|---|---|---|---|
{row("through routing", small["sandgate"])}
{row("direct", small["direct"])}

| echo round trip, 1 MiB binary (ms, n={args.mib}) | p50 | p95 | p99 |
|---|---|---|---|
{row("through routing", big["sandgate"])}
{row("direct", big["direct"])}

Routing costs {ratio:.1f}x the direct round trip for small messages (two more hops, each a
full WebSocket parse and re-frame, plus the guest tunnel); 1 MiB echoes move
{mib_rate["sandgate"]:.0f} MiB/s round trip through routing against {mib_rate["direct"]:.0f}
MiB/s direct.
""",
    )
    print(json.dumps({k: v for k, v in results.items() if k != "raw_seconds"}, indent=2))


if __name__ == "__main__":
    main()
