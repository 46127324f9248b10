"""The gateway's promises under pressure (issue 14): one server per runtime with tools, agents
driven by the scripted model, MCP sources, webhook approvals; plus helpers to act as a
sandbox of an agent."""

from __future__ import annotations

import json
import sys
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.fixtures.server import RunningServer
from tests.framework.envd import CommandResult, create, run
from tests.framework.model_server import ScriptedModelServer

MCP_SERVER = Path(__file__).resolve().parents[1] / "tools" / "mcp_server.py"
CANARY = "CANARY-5be1d0c2a97f43"
WEBHOOK_KEY = "whsec-test-8d3c1f0b"
HOST_MARKER = "SANDGATE_TEST_HOST_ONLY"


@dataclass
class Sandbox:
    """A sandbox acting as an agent, and a way to run commands in it."""

    server: RunningServer
    id: str
    token: str

    def sh(self, command: str) -> CommandResult:
        return run(self.server.url, self.id, self.token, command)

    def kill(self) -> None:
        httpx.delete(
            f"{self.server.url}/sandboxes/{self.id}", headers={"X-API-Key": self.server.api_key}
        )


def sandbox_as(server: RunningServer, agent: str | None) -> Sandbox:
    metadata = {"sandgate.agent": agent} if agent else {}
    box = create(server.url, server.api_key, timeout=300, metadata=metadata)
    return Sandbox(server, box["sandboxID"], box["envdAccessToken"])


def audit_rows(server: RunningServer, *args: str) -> list[dict[str, Any]]:
    out = server.cli("audit", "query", "--json", "--limit", "100000", *args).stdout
    return [json.loads(line) for line in out.splitlines() if line.startswith("{")]


@dataclass
class Webhooks:
    """A loopback receiver standing for an approver service (the scripted third party)."""

    url: str
    received: list[dict[str, Any]] = field(default_factory=list)
    condition: threading.Condition = field(default_factory=threading.Condition)

    def wait_for(
        self, predicate: Callable[[dict[str, Any]], bool], timeout: float = 60
    ) -> dict[str, Any]:
        with self.condition:
            found = self.condition.wait_for(
                lambda: next((r for r in self.received if predicate(r)), None), timeout
            )
        if not found:
            raise AssertionError(f"no matching webhook arrived; got {self.received}")
        return found


@pytest.fixture(scope="session")
def webhooks() -> Iterator[Webhooks]:
    hooks = Webhooks(url="")

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: Any) -> None:
            return

        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
            entry = {"headers": {k.lower(): v for k, v in self.headers.items()}, "body": body}
            with hooks.condition:
                hooks.received.append(entry)
                hooks.condition.notify_all()
            self.send_response(204)
            self.end_headers()

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    hooks.url = f"http://127.0.0.1:{server.server_address[1]}/hooks/approvals"
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield hooks
    server.shutdown()
    server.server_close()


@pytest.fixture(scope="session")
def models() -> Iterator[ScriptedModelServer]:
    server = ScriptedModelServer().start()
    yield server
    server.stop()


CONFIG = """
agents:
  - id: worker
  - id: kv-only
    tools: [kv]
  - id: budgeted
    model: budget-model
    budgets: {{max_tool_calls: 5}}
  - id: timed
    model: timed-model
    mode: classic
    # Room for the run's set-up (its sandbox, the first model turn) on a loaded machine:
    # the test needs the model to be asked before the clock runs out.
    budgets: {{max_wall_clock_s: 12}}
  - id: runner
    model: runner-model
  - id: fallback
    model: flaky-model
    fallbacks:
      - {{provider: anthropic, model: backup-model}}
  - id: asker
providers:
  openai: {{kind: openai, retries: 0, backoff_s: 0.01, cooldown_s: 300}}
  anthropic: {{kind: anthropic, retries: 0, backoff_s: 0.01}}
secrets:
  CANARY: {{env: SANDGATE_TEST_CANARY}}
  WEBHOOK_KEY: {{env: SANDGATE_TEST_WEBHOOK_KEY}}
tools:
  - {{name: kv, kind: builtin}}
  - name: env_dump
    kind: exec
    description: Prints the environment and working directory the tool got.
    command: ["{python}", "{programs}", env]
    env: {{TOOL_SETTING: configured}}
    secrets: [CANARY]
  - name: flaky
    kind: exec
    description: Fails until its third attempt for a given key.
    command: ["{python}", "{programs}", flaky, "{{key}}"]
    parameters: {{type: object, properties: {{key: {{type: string}}}}, required: [key]}}
    env: {{FLAKY_DIR: "{state}"}}
    retry: {{attempts: 3, backoff_s: 0.01}}
  - name: flaky_write
    kind: exec
    description: The same, but a write.
    command: ["{python}", "{programs}", flaky, "{{key}}"]
    parameters: {{type: object, properties: {{key: {{type: string}}}}, required: [key]}}
    env: {{FLAKY_DIR: "{state}"}}
    idempotent: false
  - name: fails
    kind: exec
    command: ["/bin/sh", "-c", "echo broken >&2; exit 3"]
  - name: mcp
    kind: mcp
    transport: stdio
    command: ["{python}", "{mcp_server}"]
    timeout_s: 2
  - name: leak
    kind: exec
    description: Returns its secret plainly, reversed and in base64.
    command: ["{python}", "{programs}", leak]
    secrets: [CANARY]
  - name: leak_none
    kind: exec
    command: ["{python}", "{programs}", leak_b64]
    secrets: [CANARY]
    output: {{mode: none}}
  - name: leak_fields
    kind: exec
    command: ["{python}", "{programs}", leak_fields]
    secrets: [CANARY]
    output: {{mode: fields, fields: [status]}}
policy:
  rules:
    - id: agents-use-tools
      effect: allow
      subject: {{agent: [worker, kv-only, budgeted, timed, runner, fallback]}}
      tool: "*"
    - {{id: asker-reads, effect: allow, subject: {{agent: asker}}, tool: kv, action: get}}
    - id: asker-quick-ask
      effect: ask
      subject: {{agent: asker}}
      tool: kv
      action: set
      args: {{key: {{glob: "quick:*"}}}}
      approval_timeout_s: 2
    - {{id: asker-writes-ask, effect: ask, subject: {{agent: asker}}, tool: kv, action: set}}
approvals:
  timeout_s: 120
  webhook_url: "{webhook}"
  webhook_secret: WEBHOOK_KEY
"""

PROGRAMS = Path(__file__).with_name("tool_programs.py")


@dataclass
class Promises:
    server: RunningServer
    models: ScriptedModelServer
    webhooks: Webhooks
    state: Path

    def headers(self) -> dict[str, str]:
        return {"X-API-Key": self.server.api_key}

    def start(self, agent: str, message: str, **body: Any) -> dict[str, Any]:
        response = httpx.post(
            f"{self.server.url}/v1/agents/{agent}/runs",
            json={"message": message, **body},
            headers=self.headers(),
        )
        assert response.status_code == 201, response.text
        return dict(response.json())

    def events(self, run_id: str) -> list[dict[str, Any]]:
        """The run's SSE stream, followed to its end (run.completed or run.failed)."""
        events: list[dict[str, Any]] = []
        with httpx.stream(
            "GET",
            f"{self.server.url}/v1/runs/{run_id}/events",
            headers=self.headers(),
            timeout=httpx.Timeout(10, read=180),
        ) as response:
            assert response.status_code == 200
            event: dict[str, Any] = {}
            for line in response.iter_lines():
                if line.startswith("event: "):
                    event["type"] = line[7:]
                elif line.startswith("data: "):
                    event["data"] = json.loads(line[6:])
                elif line == "" and event:
                    events.append(event)
                    if event["type"] in ("run.completed", "run.failed"):
                        return events
                    event = {}
        return events

    def get_run(self, run_id: str) -> dict[str, Any]:
        response = httpx.get(f"{self.server.url}/v1/runs/{run_id}", headers=self.headers())
        assert response.status_code == 200, response.text
        return dict(response.json())


@pytest.fixture(scope="session")
def promises(
    runtime_server_factory: Callable[..., RunningServer],
    models: ScriptedModelServer,
    webhooks: Webhooks,
    tmp_path_factory: pytest.TempPathFactory,
) -> Promises:
    state = tmp_path_factory.mktemp("flaky")
    config = CONFIG.format(
        python=sys.executable,
        programs=PROGRAMS,
        state=state,
        mcp_server=MCP_SERVER,
        webhook=webhooks.url,
    )
    server = runtime_server_factory(
        config=config,
        extra_env={
            "SANDGATE_TEST_CANARY": CANARY,
            "SANDGATE_TEST_WEBHOOK_KEY": WEBHOOK_KEY,
            HOST_MARKER: "host-value",
            "OPENAI_BASE_URL": models.openai_url,
            "OPENAI_API_KEY": "sk-test",
            "ANTHROPIC_BASE_URL": models.anthropic_url,
            "ANTHROPIC_API_KEY": "sk-ant-test",
        },
    )
    return Promises(server, models, webhooks, state)
