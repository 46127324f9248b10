"""The egress proxy's cost: HTTPS requests and downloads from inside a sandbox through the
proxy, spliced (a plain allowed host) and terminated (a host a secret is bound to, with the
placeholder swapped in), next to the same client on the host talking to the same server
directly.

Each request opens a new connection (the terminated path carries one request per tunnel, so
this is the fair comparison): CONNECT, TLS handshake(s), GET. Downloads are one GET of
``--mib`` MiB. Server: a local HTTPS server on the host's loopback (the tests' TLS fixture).

Usage: ``uv run python bench/egress.py [--requests 200] [--mib 64]``. Starts its own server
(fresh home, Docker runtime), writes ``bench/results/egress.json`` and the "Egress proxy"
section of docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import subprocess
import sys
import tempfile
from datetime import UTC, datetime
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.fixtures.server import ServerFactory
from tests.fixtures.tls_upstream import serve_tls_upstream
from tests.framework.envd import create, run

from bench._report import machine, write_results, write_section

CLIENT = r"""
import json, os, ssl, sys, time, urllib.request
mode, base, cafile = sys.argv[1:4]
n, size = int(sys.argv[4]), int(sys.argv[5])
handlers = [urllib.request.HTTPSHandler(context=ssl.create_default_context(cafile=cafile))]
if mode == "direct":
    handlers.append(urllib.request.ProxyHandler({}))
opener = urllib.request.build_opener(*handlers)
headers = {"Authorization": "Bearer " + os.environ.get("GH_TOKEN", "none")}
def get(path):
    with opener.open(urllib.request.Request(base + path, headers=headers), timeout=60) as r:
        return r.read()
for _ in range(5):
    get("/headers")
samples = []
for _ in range(n):
    t = time.perf_counter()
    get("/headers")
    samples.append(time.perf_counter() - t)
samples.sort()
pct = lambda q: samples[min(len(samples) - 1, round(q / 100 * (len(samples) - 1)))] * 1000
t = time.perf_counter()
body = get(f"/bytes/{size}")
assert len(body) == size
mib_s = size / 2**20 / (time.perf_counter() - t)
print(json.dumps({"p50": pct(50), "p95": pct(95), "p99": pct(99), "mib_s": mib_s}))
"""


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--requests", type=int, default=200)
    parser.add_argument("--mib", type=int, default=64)
    args = parser.parse_args()
    size = args.mib * 2**20
    work = Path(tempfile.mkdtemp(prefix="sgb-egress-"))
    factory = ServerFactory(work / "servers")
    (work / "servers").mkdir()
    secret = work / "token"
    secret.write_text("bench-secret-value\n")
    results: dict[str, object] = {}
    with serve_tls_upstream(work) as upstream:
        port = upstream.port
        names = ("bound.test", "other.test")
        config = {
            "secrets": {"GH": {"file": str(secret)}},
            "egress": {
                "resolve_overrides": {n: ["127.0.0.1"] for n in names},
                "allow": [
                    {"host": n, "ports": [port], "addresses": ["127.0.0.1/32"]} for n in names
                ],
                "secrets": [
                    {"secret": "GH", "env": "GH_TOKEN", "hosts": ["bound.test"], "ports": [port]}
                ],
                "upstream_ca_file": str(upstream.ca_file),
            },
        }
        try:
            server = factory(config=config)
            box = create(server.url, server.api_key, timeout=600)
            sid, token = box["sandboxID"], box["envdAccessToken"]
            client = base64.b64encode(CLIENT.encode()).decode()
            ca = base64.b64encode(upstream.ca_pem.encode()).decode()
            setup = run(
                server.url,
                sid,
                token,
                f"echo {client} | base64 -d > /tmp/client.py && "
                f"echo {ca} | base64 -d > /tmp/upstream-ca.pem",
            )
            if setup.exit_code != 0:
                raise SystemExit(f"setup failed: {setup.stderr}")
            for label, host, cafile in (
                ("spliced", "other.test", "/tmp/upstream-ca.pem"),
                ("terminated", "bound.test", "/run/sandgate/ca-certificates.crt"),
            ):
                out = run(
                    server.url,
                    sid,
                    token,
                    f"python3 /tmp/client.py proxy https://{host}:{port} {cafile} "
                    f"{args.requests} {size}",
                )
                if out.exit_code != 0:
                    raise SystemExit(f"{label} failed: {out.stderr}")
                results[label] = json.loads(out.stdout.strip().splitlines()[-1])
        finally:
            factory.close()
        direct = subprocess.run(
            [
                "python3",
                "-c",
                CLIENT,
                "direct",
                f"https://127.0.0.1:{port}",
                str(upstream.ca_file),
                str(args.requests),
                str(size),
            ],
            capture_output=True,
            text=True,
            check=True,
            env={k: v for k, v in os.environ.items() if "proxy" not in k.lower()},
        )
        results["direct"] = json.loads(direct.stdout.strip().splitlines()[-1])
    results["requests"] = args.requests
    results["mib"] = args.mib
    results["measured_at"] = datetime.now(UTC).isoformat(timespec="seconds")
    write_results("egress.json", results)
    rows = {k: results[k] for k in ("direct", "spliced", "terminated")}
    base = rows["direct"]
    assert isinstance(base, dict)

    def row(label: str, key: str) -> str:
        r = rows[key]
        assert isinstance(r, dict)
        return (
            f"| {label} | {r['p50']:.1f} | {r['p95']:.1f} | {r['p99']:.1f} | "
            f"{r['p50'] / base['p50']:.2f}x | {r['mib_s']:.0f} |"
        )

    write_section(
        "Egress proxy",
        f"""
Measured {results["measured_at"]} on {machine()}, Docker runtime. A Python client
(`urllib`, a new connection per request) GETs a small JSON document {args.requests} times and
then downloads {args.mib} MiB from an HTTPS server on the host's loopback. "direct" is the
same client on the host, no proxy (the baseline); "spliced" goes through the sandbox's proxy to
an allowed host (CONNECT, SNI check, byte splice); "terminated" goes to a host a secret is
bound to (the proxy terminates TLS with a minted certificate, swaps the placeholder in
`Authorization`, re-encrypts to the verified host and masks the value in the response).
Reproduce: `uv run python bench/egress.py --requests {args.requests} --mib {args.mib}`.

| HTTPS GET, new connection each (ms) | p50 | p95 | p99 | p50 vs direct | download MiB/s |
|---|---|---|---|---|---|
{row("direct (host, no proxy)", "direct")}
{row("spliced tunnel", "spliced")}
{row("terminated tunnel (secret substituted)", "terminated")}

Every spliced request costs one audited decision (`egress.connect`, fsynced), one resolution
and a close record; a terminated one adds a second TLS handshake and the audited request
record (`egress.request`).
""",
    )
    print(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
