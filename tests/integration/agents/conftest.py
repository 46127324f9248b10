"""A server with agents whose models are served by the scripted model server.

One ``sandgate serve`` and one scripted model server for the whole directory; each test
scripts its own model names, so tests do not share replies. The ``openai`` provider reaches
the scripted server through ``OPENAI_BASE_URL`` (the standard variable), the ``anthropic``
provider through ``ANTHROPIC_BASE_URL``.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.fixtures.server import RunningServer, ServerFactory
from tests.framework.model_server import ScriptedModelServer

EXAMPLE = Path(__file__).resolve().parents[3] / "examples" / "code-mode"

SKILL = """---
name: user-report
description: How to format a report about users (headings, totals first).
---
Put totals first, then one line per city.
"""

AGENTS_CONFIG = """
agents:
  - id: data-analyst
    model: analyst-model
    skills: [user-report]
    budgets: {max_steps: 4}
  - id: seeder
    model: seeder-model
  - id: looper
    model: looper-model
    budgets: {max_steps: 3}
  - id: repeater
    model: repeater-model
    budgets: {max_steps: 10}
  - id: spender
    model: spender-model
    budgets: {max_tokens: 50}
  - id: fallback
    model: flaky-model
    fallbacks:
      - {provider: anthropic, model: backup-model}
  - id: classic
    mode: classic
    model: classic-model
  - id: stateful
    model: stateful-model
  - id: careful
    model: careful-model
    autonomy: suggest
providers:
  openai: {kind: openai, retries: 1, backoff_s: 0.01, cooldown_s: 300}
  anthropic: {kind: anthropic, retries: 0, backoff_s: 0.01}
skills:
  paths: ["{skills}"]
tools:
  - name: kv
    kind: builtin
policy:
  rules:
    - id: analyst-reads-users
      effect: allow
      subject: {agent: [data-analyst, classic, careful]}
      tool: kv
      action: [get, list]
      args:
        prefix: {glob: "user:*"}
    - id: analyst-reads-one-user
      effect: allow
      subject: {agent: [data-analyst, classic, careful]}
      tool: kv
      action: get
      args:
        key: {glob: "user:*"}
    - id: analyst-never-writes
      effect: deny
      subject: {agent: data-analyst}
      tool: kv
      action: [set, delete]
    - id: seeder-writes-users
      effect: allow
      subject: {agent: seeder}
      tool: kv
      action: set
      args:
        key: {glob: "user:*"}
approvals:
  timeout_s: 60
"""


@dataclass
class AgentsEnv:
    server: RunningServer
    models: ScriptedModelServer

    def headers(self) -> dict[str, str]:
        return {"X-API-Key": self.server.api_key}

    def start(self, agent: str, message: str, session_id: str | None = None) -> dict[str, Any]:
        body: dict[str, Any] = {"message": message}
        if session_id is not None:
            body["session_id"] = session_id
        response = httpx.post(
            f"{self.server.url}/v1/agents/{agent}/runs", json=body, headers=self.headers()
        )
        assert response.status_code == 201, response.text
        return dict(response.json())

    def events(self, run_id: str) -> list[dict[str, Any]]:
        """Follows the run's SSE stream to its end (run.completed or run.failed)."""
        events: list[dict[str, Any]] = []
        with httpx.stream(
            "GET",
            f"{self.server.url}/v1/runs/{run_id}/events",
            headers=self.headers(),
            timeout=httpx.Timeout(10, read=180),
        ) as response:
            assert response.status_code == 200
            assert response.headers["content-type"].startswith("text/event-stream")
            event: dict[str, Any] = {}
            for line in response.iter_lines():
                if line.startswith("id: "):
                    event["id"] = int(line[4:])
                elif line.startswith("event: "):
                    event["type"] = line[7:]
                elif line.startswith("data: "):
                    event["data"] = json.loads(line[6:])
                elif line == "" and event:
                    events.append(event)
                    if event["type"] in ("run.completed", "run.failed"):
                        return events
                    event = {}
        return events

    def run(self, agent: str, message: str, session_id: str | None = None) -> RunResult:
        started = self.start(agent, message, session_id)
        events = self.events(started["id"])
        final = httpx.get(
            f"{self.server.url}/v1/runs/{started['id']}",
            params={"trace": "true"},
            headers=self.headers(),
        ).json()
        return RunResult(final, events)


@dataclass
class RunResult:
    run: dict[str, Any]
    events: list[dict[str, Any]]

    def of(self, kind: str) -> list[dict[str, Any]]:
        return [e["data"] for e in self.events if e["type"] == kind]

    def types(self) -> list[str]:
        return [e["type"] for e in self.events]


@pytest.fixture(scope="session")
def model_server() -> Iterator[ScriptedModelServer]:
    server = ScriptedModelServer().start()
    yield server
    server.stop()


@pytest.fixture(scope="session")
def agents_env(
    sandgate_server_factory: ServerFactory,
    model_server: ScriptedModelServer,
    tmp_path_factory: pytest.TempPathFactory,
) -> AgentsEnv:
    skills = tmp_path_factory.mktemp("skills")
    (skills / "user-report").mkdir()
    (skills / "user-report" / "SKILL.md").write_text(SKILL)
    (skills / "user-report" / "example.txt").write_text("Total: 3 users\n")
    server = sandgate_server_factory(
        config=AGENTS_CONFIG.replace("{skills}", str(skills)),
        extra_env={
            "OPENAI_BASE_URL": model_server.openai_url,
            "OPENAI_API_KEY": "sk-test",
            "ANTHROPIC_BASE_URL": model_server.anthropic_url,
            "ANTHROPIC_API_KEY": "sk-ant-test",
        },
    )
    return AgentsEnv(server, model_server)
