"""Code mode vs classic tool calling: the same task, the same scripted model.

The task is the examples/code-mode one: read 50 users from ``kv`` and report how many live in
each city. In code mode the scripted model writes one program (then answers); in classic
mode it asks for one ``kv get`` per turn through native tool calling (then answers). Both run
through a real server, real sandboxes and the real gateway; the scripted model server counts
tokens the same way for both (a quarter of the characters sent and received), and the run's
usage is the sum of what its responses reported.

Usage: ``uv run python bench/agents.py [--repeat 3]``. Writes ``bench/results/agents.json``
and the "Agents" section of docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import httpx
from tests.fixtures.server import ServerFactory
from tests.framework.model_server import Reply, ScriptedModelServer, code, text, tool_call

from bench._report import ROOT, machine, write_section

CONFIG = """
agents:
  - {id: seeder, model: seed}
  - {id: coder, model: coder, budgets: {max_steps: 5}}
  - {id: classic, mode: classic, model: classic, budgets: {max_steps: 60}}
tools: [{name: kv, kind: builtin}]
policy:
  rules:
    - {id: read, effect: allow, subject: {agent: [coder, classic]}, tool: kv, action: get}
    - {id: seed, effect: allow, subject: {agent: seeder}, tool: kv, action: set}
audit: {fsync: false}
"""

SEED = """
import sandgate_tools as tools
for n in range(1, 51):
    tools.kv.set(key=f"user:{n}", value={"id": n, "city": ["Lisbon", "Oslo", "Lima"][n % 3]})
print("ok")
"""

PROGRAM = """
from collections import Counter
import sandgate_tools as tools
users = [tools.kv.get(key=f"user:{n}") for n in range(1, 51)]
print(dict(Counter(u["city"] for u in users)))
"""

FIELDS = ("model_calls", "prompt_tokens", "completion_tokens", "tool_calls", "wall_s")
ANSWER = "Lima: 16, Lisbon: 16, Oslo: 17 users."


def classic_turn(body: dict[str, Any]) -> Reply:
    """Asks for the next user until it has seen 50 tool results, then answers."""
    seen = sum(1 for m in body["messages"] if m.get("role") == "tool")
    if seen < 50:
        return tool_call("kv", {"op": "get", "key": f"user:{seen + 1}"})
    return text(ANSWER)


def run(url: str, key: str, agent: str) -> dict[str, Any]:
    headers = {"X-API-Key": key}
    started = time.perf_counter()
    created = httpx.post(
        f"{url}/v1/agents/{agent}/runs", json={"message": "Users per city?"}, headers=headers
    ).json()
    with httpx.stream(
        "GET", f"{url}/v1/runs/{created['id']}/events", headers=headers, timeout=600
    ) as response:
        for line in response.iter_lines():
            if line.startswith("event: run.completed") or line.startswith("event: run.failed"):
                break
    wall = time.perf_counter() - started
    final = httpx.get(f"{url}/v1/runs/{created['id']}", headers=headers).json()
    if final["state"] != "completed":
        raise SystemExit(f"{agent} run did not complete: {final}")
    return {**final["usage"], "wall_s": wall}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    models = ScriptedModelServer().start()
    factory = ServerFactory(Path(tempfile.mkdtemp(prefix="sg-bench-")))
    try:
        server = factory(
            config=CONFIG,
            extra_env={"OPENAI_BASE_URL": models.openai_url, "OPENAI_API_KEY": "bench"},
        )
        models.script("seed", code(SEED), text("seeded"))
        run(server.url, server.api_key, "seeder")
        results: dict[str, list[dict[str, Any]]] = {"code": [], "classic": []}
        for _ in range(args.repeat):
            models.script("coder", code(PROGRAM), text(ANSWER))
            results["code"].append(run(server.url, server.api_key, "coder"))
            models.script("classic", Reply(repeat=True, respond=classic_turn))
            results["classic"].append(run(server.url, server.api_key, "classic"))
    finally:
        factory.close()
        models.stop()
    summary = {
        mode: {
            field: statistics.median(r[field] for r in runs)
            for field in (
                "model_calls",
                "prompt_tokens",
                "completion_tokens",
                "tool_calls",
                "wall_s",
            )
        }
        for mode, runs in results.items()
    }
    out = ROOT / "bench" / "results" / "agents.json"
    out.write_text(
        json.dumps(
            {
                "when": datetime.now(UTC).isoformat(),
                "machine": machine(),
                "runs": results,
                "median": summary,
            },
            indent=2,
        )
    )
    code_m, classic_m = summary["code"], summary["classic"]
    rows = "\n".join(
        f"| {label} | {code_m[f]:,.0f} | {classic_m[f]:,.0f} | {classic_m[f] / code_m[f]:.1f}x |"
        for label, f in (
            ("model round trips", "model_calls"),
            ("prompt tokens", "prompt_tokens"),
            ("completion tokens", "completion_tokens"),
            ("tool calls (via gateway)", "tool_calls"),
        )
    )
    wall = (
        f"| wall time | {code_m['wall_s']:.2f} s | {classic_m['wall_s']:.2f} s "
        f"| {classic_m['wall_s'] / code_m['wall_s']:.1f}x |"
    )
    body = f"""
`bench/agents.py`, {machine()}: the examples/code-mode task (read 50 users, count them per
city) run by the same scripted model in code mode (one program) and in classic mode (one native
tool call per turn), through a real server, sandboxes and gateway. Tokens are what the
scripted API's responses reported (a quarter of the characters sent/received, identical rule
for both modes); medians of {args.repeat} runs.

| measure | code mode | classic mode | classic / code |
|---|---|---|---|
{rows}
{wall}

Wall time here excludes model latency (the scripted model answers at once); with a real
model each extra round trip adds its latency, so the gap widens.
"""
    write_section("Agents", body)
    print(json.dumps(summary, indent=2))


if __name__ == "__main__":
    main()
