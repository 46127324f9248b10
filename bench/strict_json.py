"""What strict JSON costs: ``sandgate.strictjson.loads`` next to ``json.loads`` on the same
bytes, for the documents the edges see (a create body, a Connect request, a tool call) and
for large ones (a long string, many small objects, deep-but-legal nesting).

Usage: ``uv run python bench/strict_json.py``. Writes ``bench/results/strict_json.json`` and
the "Strict JSON" section of docs/benchmarks.md.
"""

from __future__ import annotations

import json
import sys
import timeit
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench._report import ROOT, machine, write_section
from sandgate.strictjson import MAX_DEPTH, loads

DOCUMENTS: dict[str, bytes] = {
    "E2B create body (142 B)": json.dumps(
        {
            "templateID": "base",
            "timeout": 300,
            "metadata": {"a": "b", "c": "d"},
            "envVars": {"X": "1"},
            "secure": True,
            "allow_internet_access": True,
        }
    ).encode(),
    "Connect Process/Start": json.dumps(
        {
            "process": {"cmd": "/bin/bash", "args": ["-l", "-c", "echo hi"], "envs": {}},
            "stdin": False,
        }
    ).encode(),
    "tool call line": json.dumps(
        {"tool": "kv", "arguments": {"op": "set", "key": "user:1", "value": {"n": [1, 2.5]}}}
    ).encode(),
    "1 MiB string": json.dumps({"content": "x" * (1 << 20)}).encode(),
    "20k small objects (1.3 MB)": json.dumps(
        [{"id": i, "name": f"n{i}", "vals": [1.5, 2, 3], "ok": True} for i in range(20_000)]
    ).encode(),
    f"nesting {MAX_DEPTH} (the cap) x 1000": json.dumps(
        [json.loads("[" * (MAX_DEPTH - 1) + "]" * (MAX_DEPTH - 1)) for _ in range(1000)]
    ).encode(),
}


def best_us(fn: Callable[[bytes], Any], document: bytes) -> float:
    runs = max(3, min(20_000, 2_000_000 // max(1, len(document))))
    return min(timeit.repeat(lambda: fn(document), number=runs, repeat=5)) / runs * 1e6


def main() -> None:
    rows = []
    for name, document in DOCUMENTS.items():
        plain, strict = best_us(json.loads, document), best_us(loads, document)
        rows.append(
            {"document": name, "bytes": len(document), "json_us": plain, "strict_us": strict}
        )
    results = {"measured": datetime.now(UTC).isoformat(timespec="seconds"), "machine": machine()}
    results["rows"] = rows  # type: ignore[assignment]
    (ROOT / "bench" / "results" / "strict_json.json").write_text(json.dumps(results, indent=2))
    table = [
        "| document | bytes | json.loads (µs) | strictjson.loads (µs) | ratio |",
        "|---|---|---|---|---|",
    ]
    for row in rows:
        table.append(
            f"| {row['document']} | {row['bytes']} | {row['json_us']:.1f} | "
            f"{row['strict_us']:.1f} | {row['strict_us'] / row['json_us']:.2f}x |"
        )
    write_section(
        "Strict JSON",
        f"""
Measured {results["measured"]} on {results["machine"]}. Best of five runs of each decoder on
the same bytes; every edge (HTTP bodies, Connect messages, the gateway socket, guest frames)
decodes with `sandgate.strictjson`. The hooks (duplicate keys, number ranges) cost a few
microseconds on a request; the depth and surrogate walks run only when a C-speed scan says
they could matter, so large documents pay a small multiple of `json.loads`, bounded by each
edge's body limit. Reproduce: `uv run python bench/strict_json.py`.

{chr(10).join(table)}
""",
    )
    print("\n".join(table))


if __name__ == "__main__":
    main()
