# ruff: noqa: E501 (the config below is YAML, one step per line)
"""Servers running workflows, on each store (SQLite, PostgreSQL) and each runtime.

``wf`` is parametrised over the store (``sqlite`` | ``postgres``) and, through the
``runtime`` dimension, over the sandbox runtime; each store runs on one runtime
(``RUNTIME_OF_STORE``): two servers, each with its own home and (PostgreSQL) its own database,
which holds both Sandgate's store and DBOS's system schema. Its tools are small host programs that report when they ran, so tests can
measure overlap and count executions in the audit log (the record of what ran).
"""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import httpx
import pytest

from tests.fixtures.pairing import deselect_unpaired
from tests.fixtures.postgres import postgres_database
from tests.fixtures.runtimes import runtime_env
from tests.fixtures.server import RunningServer, ServerFactory, reap_bwrap_sandboxes
from tests.framework.model_server import ScriptedModelServer

STORES = ("sqlite", "postgres")
#: The store holds a run's state and checkpoints; the runtime only runs its code steps'
#: sandboxes, and nothing in the engine joins the two. So every scenario runs on each store
#: (the issue asks for both) and on each runtime, paired as deployments pair them: the
#: single-host SQLite on bwrap, PostgreSQL (production) on Docker. The other two pairs
#: repeat what these prove.
RUNTIME_OF_STORE = {"sqlite": "bwrap", "postgres": "docker"}

#: ``stamp`` sleeps and says when it started and ended (idempotent); ``charge`` is the same
#: as a write (not idempotent), and ``charge_marked`` also creates the file ``mark`` the moment
#: it begins to act; ``broken`` and ``broken_read`` fail (a write, a read).
TOOLS = """
tools:
  - name: kv
    kind: builtin
  - name: workflow_run
    kind: builtin
  - name: stamp
    kind: exec
    command: ["/bin/sh", "-c", "s=$(date +%s.%N); sleep $1; e=$(date +%s.%N); printf '{\\"start\\": %s, \\"end\\": %s, \\"tag\\": \\"%s\\"}' $s $e \\"$2\\"", "sh", "{sleep}", "{tag}"]
    parameters:
      type: object
      properties: {sleep: {type: number}, tag: {type: string}}
      required: [sleep, tag]
    timeout_s: 60
  - name: charge
    kind: exec
    idempotent: false
    command: ["/bin/sh", "-c", "sleep $1; printf '{\\"charged\\": \\"%s\\"}' \\"$2\\"", "sh", "{sleep}", "{tag}"]
    parameters:
      type: object
      properties: {sleep: {type: number}, tag: {type: string}}
      required: [sleep, tag]
    timeout_s: 60
  - name: charge_marked
    kind: exec
    idempotent: false
    command: ["/bin/sh", "-c", ": > \\"$3\\"; sleep $1; printf '{\\"charged\\": \\"%s\\"}' \\"$2\\"", "sh", "{sleep}", "{tag}", "{mark}"]
    parameters:
      type: object
      properties: {sleep: {type: number}, tag: {type: string}, mark: {type: string}}
      required: [sleep, tag, mark]
    timeout_s: 60
  - name: broken
    kind: exec
    idempotent: false
    command: ["/bin/sh", "-c", "echo 'the payment service said no' >&2; exit 3"]
  - name: broken_read
    kind: exec
    command: ["/bin/sh", "-c", "echo 'upstream 503' >&2; exit 3"]
agents:
  - id: reporter
    model: reporter-model
  - id: launcher
    model: launcher-model
  - id: other_team_only
    teams: [nobody]
providers:
  openai: {kind: openai, retries: 0, backoff_s: 0.01}
policy:
  rules:
    - id: workflows-may-call
      effect: allow
      subject: {metadata: {sandgate.workflow: "*"}}
    - id: launcher-starts-workflows
      effect: allow
      subject: {agent: launcher}
      tool: workflow_run
approvals:
  timeout_s: 60
"""

WORKFLOWS = """
workflows:
  - name: diamond
    description: fetch, two analyses in sandboxes side by side, then join
    steps:
      - {id: fetch, kind: tool, tool: stamp, arguments: {sleep: 0, tag: fetched}}
      - id: left
        kind: code
        code: &analyse |
          import json, os, time
          import sandgate_tools as t
          data = json.load(open(os.environ["SANDGATE_STEP_INPUT"]))
          start = time.time()
          time.sleep(2)
          t.kv.set(key="wf:" + data["side"], value=data["tag"])
          json.dump({"side": data["side"], "start": start, "end": time.time()},
                    open(os.environ["SANDGATE_STEP_OUTPUT"], "w"))
        inputs: {side: left, tag: "${steps.fetch.output.tag}"}
      - id: right
        kind: code
        code: *analyse
        inputs: {side: right, tag: "${steps.fetch.output.tag}"}
      - id: join
        kind: tool
        tool: stamp
        arguments: {sleep: 0, tag: "${steps.left.output.result.side}+${steps.right.output.result.side}"}
    output: {left: "${steps.left.output.result}", right: "${steps.right.output.result}", joined: "${steps.join.output.tag}"}
  - name: fanout
    inputs:
      type: object
      properties: {n: {type: integer, minimum: 1}}
      required: [n]
    steps:
      - id: list
        kind: code
        idempotent: true
        retries: 1
        code: |
          import json, os
          n = json.load(open(os.environ["SANDGATE_STEP_INPUT"]))["n"]
          json.dump({"items": list(range(n))}, open(os.environ["SANDGATE_STEP_OUTPUT"], "w"))
        inputs: {n: "${inputs.n}"}
      - id: each
        kind: tool
        tool: stamp
        for_each: "${steps.list.output.result.items}"
        concurrency: 5
        arguments: {sleep: 0.3, tag: "item-${item}"}
    output: "${steps.each.output}"
    concurrency: 16
  - name: approve
    inputs: {type: object, properties: {amount: {type: number}}, required: [amount]}
    steps:
      - {id: quote, kind: tool, tool: stamp, arguments: {sleep: 0, tag: "quote-${inputs.amount}"}}
      - id: ask
        kind: approval
        message: "Pay ${inputs.amount}?"
        details: {quote: "${steps.quote.output.tag}"}
        timeout_s: 300
      - {id: pay, kind: tool, tool: charge, arguments: {sleep: 0, tag: "${steps.quote.output.tag}"}, depends_on: [ask]}
  - name: approve_quickly
    steps:
      - {id: ask, kind: approval, message: "Anyone?", timeout_s: 2}
      - {id: pay, kind: tool, tool: charge, arguments: {sleep: 0, tag: never}, depends_on: [ask]}
  - name: resume
    steps:
      - {id: first, kind: tool, tool: stamp, arguments: {sleep: 0, tag: first}}
      - {id: slow, kind: tool, tool: stamp, arguments: {sleep: 6, tag: slow}, depends_on: [first]}
      - {id: last, kind: tool, tool: charge, arguments: {sleep: 0, tag: last}, depends_on: [slow]}
  - name: pay
    inputs: {type: object, properties: {mark: {type: string}}, required: [mark]}
    steps:
      - {id: first, kind: tool, tool: stamp, arguments: {sleep: 0, tag: first}}
      - {id: transfer, kind: tool, tool: charge_marked, arguments: {sleep: 6, tag: transfer, mark: "${inputs.mark}"}, depends_on: [first]}
      - {id: last, kind: tool, tool: stamp, arguments: {sleep: 0, tag: last}, depends_on: [transfer]}
  - name: failing
    steps:
      - {id: read, kind: tool, tool: broken_read, retries: 2, backoff_s: 0.1}
  - name: failing_write
    steps:
      - {id: write, kind: tool, tool: broken}
      - {id: after, kind: tool, tool: stamp, arguments: {sleep: 0, tag: after}, depends_on: [write]}
  - name: branching
    inputs: {type: object, properties: {big: {type: boolean}}, required: [big]}
    steps:
      - {id: size, kind: tool, tool: stamp, arguments: {sleep: 0, tag: size}}
      - {id: big, kind: tool, tool: stamp, arguments: {sleep: 0, tag: big}, when: "inputs.big and steps.size.output.tag == 'size'"}
      - {id: small, kind: tool, tool: stamp, arguments: {sleep: 0, tag: small}, when: "not inputs.big", depends_on: [size]}
      - {id: child, kind: workflow, workflow: approve_free, inputs: {tag: "${steps.size.output.tag}"}}
    output: {big: "${steps.big.output}", small: "${steps.small.output}", child: "${steps.child.output}"}
  - name: approve_free
    inputs: {type: object, properties: {tag: {type: string}}, required: [tag]}
    steps:
      - {id: echo, kind: tool, tool: stamp, arguments: {sleep: 0, tag: "child-${inputs.tag}"}}
    output: "${steps.echo.output.tag}"
  - name: analyst
    steps:
      - {id: report, kind: agent, agent: reporter, message: "Write the report"}
      - {id: store, kind: tool, tool: charge, arguments: {sleep: 0, tag: "${steps.report.output.answer}"}}
  - name: slow_run
    timeout_s: 2
    steps:
      - {id: wait, kind: tool, tool: stamp, arguments: {sleep: 10, tag: late}}
  - name: budget_steps
    budgets: {max_tool_calls: 2}
    steps:
      - {id: one, kind: tool, tool: stamp, arguments: {sleep: 0, tag: one}}
      - {id: two, kind: tool, tool: stamp, arguments: {sleep: 0, tag: two}, depends_on: [one]}
      - {id: three, kind: tool, tool: stamp, arguments: {sleep: 0, tag: three}, depends_on: [two]}
  - name: budget_code
    budgets: {max_tool_calls: 3}
    steps:
      - {id: fetch, kind: tool, tool: stamp, arguments: {sleep: 0, tag: fetched}}
      - id: spend
        kind: code
        depends_on: [fetch]
        code: |
          import json, os
          import sandgate_tools as t
          answers = []
          for i in range(10):
              try:
                  t.kv.set(key=f"budget:{i}", value="x")
                  answers.append("ok")
              except Exception as exc:  # the script swallows the refusal and goes on
                  answers.append(type(exc).__name__)
          json.dump(answers, open(os.environ["SANDGATE_STEP_OUTPUT"], "w"))
      - {id: after, kind: tool, tool: stamp, arguments: {sleep: 0, tag: after}, depends_on: [spend]}
  - name: slow_step
    steps:
      - {id: nap, kind: code, timeout_s: 3, code: "import time; time.sleep(600)"}
      - {id: after, kind: tool, tool: stamp, arguments: {sleep: 0, tag: after}, depends_on: [nap]}
"""


def pg_database() -> tuple[str, Callable[[], None]]:
    """A fresh PostgreSQL database on the test server, and how to drop it."""
    stack = contextlib.ExitStack()
    url = stack.enter_context(postgres_database("sg_wf"))
    return url.replace("postgresql://", "postgresql+psycopg://", 1), stack.close


@dataclass
class WorkflowsEnv:
    server: RunningServer
    store: str
    runtime: str

    def headers(self) -> dict[str, str]:
        return {"X-API-Key": self.server.api_key}

    def start(self, name: str, inputs: dict[str, Any] | None = None) -> dict[str, Any]:
        response = httpx.post(
            f"{self.server.url}/v1/workflows/{name}/runs",
            json={"inputs": inputs or {}},
            headers=self.headers(),
        )
        assert response.status_code == 201, response.text
        return dict(response.json())

    def get(self, run_id: str) -> dict[str, Any]:
        response = httpx.get(
            f"{self.server.url}/v1/workflow-runs/{run_id}", headers=self.headers(), timeout=30
        )
        assert response.status_code == 200, response.text
        return dict(response.json())

    def step(self, run: dict[str, Any], step_id: str) -> dict[str, Any]:
        return next(s for s in run["steps"] if s["id"] == step_id)

    def events(self, run_id: str, *, last_event_id: int | None = None) -> list[dict[str, Any]]:
        """Follows the run's SSE stream until the run ends."""
        headers = self.headers()
        if last_event_id is not None:
            headers["Last-Event-ID"] = str(last_event_id)
        events: list[dict[str, Any]] = []
        with httpx.stream(
            "GET",
            f"{self.server.url}/v1/workflow-runs/{run_id}/events",
            headers=headers,
            timeout=httpx.Timeout(10, read=180),
        ) as response:
            assert response.status_code == 200, response.read()
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
                    event = {}
        return events

    def finish(self, run_id: str) -> dict[str, Any]:
        """The run once it ended (its event stream closes when it does)."""
        self.events(run_id)
        return self.get(run_id)

    def run(self, name: str, inputs: dict[str, Any] | None = None) -> dict[str, Any]:
        return self.finish(self.start(name, inputs)["id"])

    def wait_for(
        self, run_id: str, check: Callable[[dict[str, Any]], bool], timeout_s: float = 120
    ) -> dict[str, Any]:
        """Polls the run until ``check`` holds (for states between events, e.g. after a
        restart); fails with the run as it was."""
        deadline = time.monotonic() + timeout_s
        run = self.get(run_id)
        while not check(run):
            if time.monotonic() > deadline:
                raise AssertionError(f"run {run_id} never got there: {json.dumps(run)[:3000]}")
            time.sleep(0.1)
            run = self.get(run_id)
        return run

    def audit(self, run_id: str, event: str = "tool.call") -> list[dict[str, Any]]:
        """The audit log's records of ``event`` made for ``run_id`` (its tool steps and the
        sandboxes of its code steps), oldest first."""
        found = []
        path = self.server.home / "audit" / "audit.jsonl"
        for line in path.read_text().splitlines():
            record = json.loads(line)
            workflow = (record.get("subject") or {}).get("workflow") or {}
            if record.get("event") == event and workflow.get("run") == run_id:
                found.append(record)
        return found

    def calls_of(self, run_id: str, step: str) -> list[dict[str, Any]]:
        return [r for r in self.audit(run_id) if r["subject"]["workflow"]["step"] == step]


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Leaves out the workflow tests whose (store, runtime) pair is not ``RUNTIME_OF_STORE``'s."""
    deselect_unpaired(config, items, "store_kind", RUNTIME_OF_STORE)


@pytest.fixture(
    scope="session",
    params=[
        pytest.param(store, marks=[pytest.mark.postgres] if store == "postgres" else [])
        for store in STORES
    ],
)
def store_kind(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture(scope="session")
def model_server() -> Iterator[ScriptedModelServer]:
    server = ScriptedModelServer().start()
    yield server
    server.stop()


@pytest.fixture(scope="session")
def workflows_servers(
    sandgate_server_factory: ServerFactory, model_server: ScriptedModelServer
) -> Iterator[Callable[[str, str], RunningServer]]:
    """One server per (store, runtime), started on first use."""
    started: dict[tuple[str, str], RunningServer] = {}
    drops: list[Callable[[], None]] = []

    def get(store: str, runtime: str) -> RunningServer:
        key = (store, runtime)
        if key not in started:
            env = {
                **runtime_env(runtime),
                "OPENAI_BASE_URL": model_server.openai_url,
                "OPENAI_API_KEY": "sk-test",
            }
            if store == "postgres":
                url, drop = pg_database()
                drops.append(drop)
                env["SANDGATE_STORE__URL"] = url
            started[key] = sandgate_server_factory(config=TOOLS + WORKFLOWS, extra_env=env)
        return started[key]

    yield get
    for (_, runtime), server in started.items():
        server.stop()
        if runtime == "bwrap":
            reap_bwrap_sandboxes(server.home)
    for drop in drops:
        drop()


@pytest.fixture
def wf(
    store_kind: str, runtime: str, workflows_servers: Callable[[str, str], RunningServer]
) -> WorkflowsEnv:
    server = workflows_servers(store_kind, runtime)
    if not server.is_running:  # a restart test failed midway: give the next test a server
        server.start()
    return WorkflowsEnv(server, store_kind, runtime)
