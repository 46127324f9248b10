"""``run_code("1+1")``: round trip in a warm sandbox and time to first result in a fresh one,
through the official Python SDK (e2b 2.63.0 + e2b-code-interpreter 2.11.5).

Usage: ``uv run python bench/code_interpreter.py [--fresh 10] [--roundtrips 200]``. Starts its
own server (fresh home, same Docker engine; builds ``code-interpreter-v1`` if missing), writes
``bench/results/code_interpreter.json`` and the "Code interpreter" section of
docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from datetime import UTC, datetime
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.compat.clients import CLIENTS, prepare
from tests.fixtures.server import ServerFactory

from bench._report import ROOT, machine, summary_ms, write_section


def row(label: str, ms: dict[str, float]) -> str:
    return f"| {label} | {ms['p50']:.1f} | {ms['p95']:.1f} | {ms['p99']:.1f} |"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--fresh", type=int, default=10)
    parser.add_argument("--roundtrips", type=int, default=200)
    args = parser.parse_args()
    client = prepare(next(c for c in CLIENTS if c.name == "py-e2b-2.63.0"))
    with tempfile.TemporaryDirectory(prefix="sgb", dir="/tmp") as base_dir:
        factory = ServerFactory(Path(base_dir))
        server = factory()
        try:
            worker = ROOT / "bench" / "workers" / "code_interpreter.py"
            proc = subprocess.run(
                [str(client.python), str(worker), str(args.fresh), str(args.roundtrips)],
                env={**server.env, "PATH": "/usr/bin:/bin"},
                capture_output=True,
                text=True,
                check=True,
                timeout=1800,
            )
            raw = json.loads(proc.stdout.strip().splitlines()[-1])
        finally:
            factory.close()
    results = {
        "when": datetime.now(UTC).isoformat(timespec="seconds"),
        "machine": machine(),
        "ms": {key: summary_ms(samples) for key, samples in raw.items()},
        "counts": {key: len(samples) for key, samples in raw.items()},
    }
    out = ROOT / "bench" / "results" / "code_interpreter.json"
    out.parent.mkdir(exist_ok=True)
    out.write_text(json.dumps(results, indent=2) + "\n")
    ms = results["ms"]
    write_section(
        "Code interpreter",
        f"""
Measured {results["when"]} on {results["machine"]}, Docker engine local, cold sandboxes (no
warm pool). Through the official Python SDK `e2b==2.63.0` + `e2b-code-interpreter==2.11.5` over
loopback HTTP; every request goes gateway → guest tunnel → the in-sandbox server → ipykernel.
Reproduce: `uv run python bench/code_interpreter.py`.

| measure (ms) | p50 | p95 | p99 |
|---|---|---|---|
{row(f"`run_code('1+1')` round trip, warm sandbox (n={args.roundtrips})", ms["roundtrip"])}
{row(f"fresh sandbox: create → first `1+1` result (n={args.fresh})", ms["create_to_first_result"])}
{row(f"fresh sandbox: first `run_code('1+1')` after create (n={args.fresh})", ms["first_call"])}

Create returns once the server listens, and the server listens once the default Python kernel
answers, so the first call pays no kernel start: create → first result is mostly the
container plus the ipykernel start (no warm pool yet: pending). The JavaScript (Deno) kernel
starts on first use and adds its own start-up (about 1.5 s) to that first call.
""",
    )
    print(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
