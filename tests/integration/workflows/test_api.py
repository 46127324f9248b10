"""The workflow model through the HTTP API and the CLI; agents in workflows and workflows
started by agents; cancel; schedules; the reserved metadata."""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.fixtures.server import RunningServer, ServerFactory
from tests.framework.envd import create
from tests.framework.model_server import ScriptedModelServer, code, text
from tests.integration.workflows.conftest import TOOLS, WorkflowsEnv


@pytest.fixture
def one(workflows_servers: Callable[[str, str], RunningServer]) -> WorkflowsEnv:
    """The SQLite + bwrap server (these tests are about the interfaces, not the stores)."""
    server = workflows_servers("sqlite", "bwrap")
    if not server.is_running:
        server.start()
    return WorkflowsEnv(server, "sqlite", "bwrap")


def test_a_workflow_defined_through_the_api_runs(one: WorkflowsEnv) -> None:
    url = f"{one.server.url}/v1/workflows/api_made"
    body = {
        "inputs": {
            "type": "object",
            "properties": {"who": {"type": "string"}},
            "required": ["who"],
        },
        "steps": [
            {
                "id": "hello",
                "kind": "tool",
                "tool": "stamp",
                "arguments": {"sleep": 0, "tag": "hi ${inputs.who}"},
            },
        ],
        "output": "${steps.hello.output.tag}",
    }
    response = httpx.put(url, json=body, headers=one.headers())
    assert response.status_code == 200, response.text
    assert response.json()["source"] == "api"
    listed = httpx.get(f"{one.server.url}/v1/workflows", headers=one.headers()).json()
    assert "api_made" in {w["name"] for w in listed["workflows"]}

    run = one.run("api_made", {"who": "ada"})
    assert run["state"] == "completed" and run["output"] == "hi ada"

    # Another team neither sees nor runs it.
    other = json.loads(
        one.server.cli(
            "keys", "create", "--name", "other", "--team", f"other-{time.monotonic_ns()}", "--json"
        )
        .stdout.strip()
        .splitlines()[-1]
    )
    hidden = httpx.post(
        f"{url}/runs", json={"inputs": {"who": "x"}}, headers={"X-API-Key": other["key"]}
    )
    assert hidden.status_code == 404
    assert httpx.delete(url, headers=one.headers()).status_code == 204
    assert httpx.get(url, headers=one.headers()).status_code == 404


@pytest.mark.parametrize(
    ("steps", "message"),
    [
        (
            [
                {
                    "id": "a",
                    "kind": "tool",
                    "tool": "stamp",
                    "depends_on": ["b"],
                    "arguments": {"sleep": 0, "tag": "x"},
                }
            ],
            "step 'a': depends_on names 'b'",
        ),
        (
            [
                {
                    "id": "a",
                    "kind": "tool",
                    "tool": "stamp",
                    "arguments": {"sleep": 0, "tag": "${steps.b.output}"},
                },
                {
                    "id": "b",
                    "kind": "tool",
                    "tool": "stamp",
                    "arguments": {"sleep": 0, "tag": "${steps.a.output}"},
                },
            ],
            "cycle: a → b → a",
        ),
        (
            [
                {
                    "id": "a",
                    "kind": "tool",
                    "tool": "stamp",
                    "arguments": {"sleep": 0, "tag": "${steps.a.output.x}"},
                }
            ],
            "step 'a': .*own output",
        ),
        (
            [
                {
                    "id": "pay",
                    "kind": "tool",
                    "tool": "charge",
                    "retries": 3,
                    "arguments": {"sleep": 0, "tag": "x"},
                }
            ],
            "step 'pay': retries need an idempotent step; tool 'charge' is not marked idempotent",
        ),
        ([{"id": "a", "kind": "tool", "tool": "nope"}], "step 'a': there is no tool 'nope'"),
    ],
)
def test_a_bad_workflow_is_refused_naming_the_step(
    one: WorkflowsEnv, steps: list[dict[str, Any]], message: str
) -> None:
    response = httpx.put(
        f"{one.server.url}/v1/workflows/bad_one", json={"steps": steps}, headers=one.headers()
    )
    assert response.status_code == 400
    assert response.json()["error_code"] == "invalid_workflow"
    assert __import__("re").search(message, response.json()["message"]), response.json()


def test_config_workflows_cannot_be_replaced_and_inputs_are_checked(one: WorkflowsEnv) -> None:
    replaced = httpx.put(
        f"{one.server.url}/v1/workflows/diamond",
        json={"steps": [{"id": "a", "kind": "tool", "tool": "stamp"}]},
        headers=one.headers(),
    )
    assert replaced.status_code == 409
    bad = httpx.post(
        f"{one.server.url}/v1/workflows/approve/runs",
        json={"inputs": {"amount": "lots"}},
        headers=one.headers(),
    )
    assert bad.status_code == 400
    assert bad.json()["error_code"] == "invalid_arguments"
    assert "input amount" in bad.json()["message"]
    missing = httpx.post(
        f"{one.server.url}/v1/workflows/ghost/runs", json={}, headers=one.headers()
    )
    assert missing.status_code == 404


def test_sandbox_creators_cannot_claim_a_workflow(one: WorkflowsEnv) -> None:
    response = httpx.post(
        f"{one.server.url}/sandboxes",
        json={"templateID": "base", "metadata": {"sandgate.workflow_run": "wfr_forged"}},
        headers=one.headers(),
    )
    assert response.status_code == 400
    assert "reserved" in response.json()["message"]


def test_cancel_a_waiting_run_denies_its_approval(one: WorkflowsEnv) -> None:
    started = one.start("approve", {"amount": 5})
    run = one.wait_for(started["id"], lambda r: one.step(r, "ask")["state"] == "waiting")
    approval = one.step(run, "ask")["detail"]["approval"]

    cancelled = one.server.cli("workflows", "cancel", started["id"]).stdout
    assert "cancelled" in cancelled

    run = one.get(started["id"])
    assert run["state"] == "cancelled"
    assert one.step(run, "ask")["state"] == "cancelled"
    decided = httpx.get(f"{one.server.url}/v1/approvals", headers=one.headers()).json()
    assert next(a for a in decided["approvals"] if a["id"] == approval)["state"] == "denied"
    again = httpx.post(
        f"{one.server.url}/v1/workflow-runs/{run['id']}/cancel", headers=one.headers()
    )
    assert again.status_code == 409
    assert one.calls_of(run["id"], "pay") == []


def test_cli_lists_runs_and_shows_the_dag(one: WorkflowsEnv) -> None:
    listed = one.server.cli("workflows", "list").stdout
    assert "diamond" in listed and "fanout" in listed

    ran = one.server.cli("workflows", "run", "branching", "--input", "big=true", "--wait")
    assert ran.returncode == 0
    run_id = ran.stdout.split()[1]
    shown = one.server.cli("workflows", "show", run_id).stdout
    assert "completed" in shown
    for line in (
        "size (tool)",
        "big (tool) ← size",
        "small (tool) ← size",
        "child (workflow) ← size",
    ):
        assert line in shown, shown
    assert "skipped" in shown
    data = json.loads(one.server.cli("workflows", "show", run_id, "--json").stdout)
    assert data["state"] == "completed" and data["output"]["big"]["tag"] == "big"
    failed = one.server.cli("workflows", "run", "failing_write", "--wait", check=False)
    assert failed.returncode == 1
    bad_input = one.server.cli("workflows", "run", "approve", "--input", "amount", check=False)
    assert bad_input.returncode == 1 and "KEY=VALUE" in bad_input.stderr


def test_an_agent_step_and_an_agent_starting_a_workflow(
    one: WorkflowsEnv, model_server: ScriptedModelServer
) -> None:
    model_server.script("reporter-model", text("Report: 3 users, all active."))
    run = one.run("analyst")
    assert run["state"] == "completed", run
    report = one.step(run, "report")["output"]
    assert report["answer"] == "Report: 3 users, all active."
    assert one.step(run, "store")["output"] == {"charged": "Report: 3 users, all active."}
    assert run["usage"]["tokens"] > 0

    # The other way round: an agent's code starts a workflow through the workflow_run tool.
    model_server.script(
        "launcher-model",
        code(
            "import sandgate_tools as t\n"
            "r = t.workflow_run(workflow='approve_free', inputs={'tag': 'agent'}, wait_s=120)\n"
            "print(r['state'], r['output'])\n"
        ),
        text("done"),
    )
    response = httpx.post(
        f"{one.server.url}/v1/agents/launcher/runs",
        json={"message": "start it"},
        headers=one.headers(),
    )
    assert response.status_code == 201, response.text
    agent_run = response.json()["id"]
    deadline = time.monotonic() + 180
    while True:
        state = httpx.get(
            f"{one.server.url}/v1/runs/{agent_run}", params={"trace": "true"}, headers=one.headers()
        ).json()
        if state["state"] in ("completed", "failed"):
            break
        assert time.monotonic() < deadline, state
        time.sleep(0.2)
    assert state["state"] == "completed", state
    outputs = [e["data"] for e in state["trace"] if e["type"] == "code.completed"]
    assert "completed child-agent" in outputs[0]["stdout"], outputs
    started = [
        r
        for r in httpx.get(
            f"{one.server.url}/v1/workflow-runs",
            params={"workflow": "approve_free"},
            headers=one.headers(),
        ).json()["runs"]
        if r["trigger"] == "tool"
    ]
    assert started and started[0]["output"] == "child-agent"


@pytest.fixture(scope="module")
def scheduled(sandgate_server_factory: ServerFactory) -> Iterator[RunningServer]:
    config = (
        TOOLS
        + """
workflows:
  - name: tick
    schedule: "*/2 * * * * *"
    schedule_team: ops
    schedule_inputs: {tag: tock}
    inputs: {type: object, properties: {tag: {type: string}}}
    steps:
      - {id: stamp, kind: tool, tool: stamp, arguments: {sleep: 0, tag: "${inputs.tag}"}}
"""
    )
    server = sandgate_server_factory(config=config, extra_env={"SANDGATE_RUNTIME": "bwrap"})
    yield server
    server.stop()


def test_a_scheduled_workflow_runs_on_its_own(scheduled: RunningServer) -> None:
    path = scheduled.home / "audit" / "audit.jsonl"
    deadline = time.monotonic() + 60
    found: list[dict[str, Any]] = []
    while len(found) < 2:
        assert time.monotonic() < deadline, "no scheduled run within 60 s"
        time.sleep(0.5)
        found = [
            record
            for record in map(json.loads, path.read_text().splitlines())
            if record.get("event") == "tool.call" and record.get("tool") == "stamp"
        ]
    runs = {r["subject"]["workflow"]["run"] for r in found}
    assert len(runs) == len(found)  # one call per scheduled run, each its own run
    assert all(r["outcome"] == "allowed" for r in found)


def test_a_sandbox_of_the_team_is_unaffected(one: WorkflowsEnv) -> None:
    """Workflow metadata is refused only for the reserved keys: other metadata still works."""
    created = create(one.server.url, one.server.api_key, timeout=120, metadata={"purpose": "check"})
    httpx.delete(f"{one.server.url}/sandboxes/{created['sandboxID']}", headers=one.headers())
    assert created["sandboxID"]


LAZY_CONFIG = """
tools:
  - {name: kv, kind: builtin}
  - name: gate
    kind: exec
    command:
      - /bin/sh
      - -c
      - "while [ ! -e \\"$1\\" ]; do sleep 0.05; done; echo '{}'"
      - sh
      - "{path}"
    parameters: {type: object, properties: {path: {type: string}}, required: [path]}
    timeout_s: 120
policy:
  rules:
    - id: workflows-may-call
      effect: allow
      subject: {metadata: {sandgate.workflow: "*"}}
"""


def test_the_engine_starts_at_the_first_run_when_nothing_needs_it_sooner(
    sandgate_server_factory: ServerFactory,
) -> None:
    """No shared workflows and no unfinished runs: DBOS is not started with the server (it
    would cost every start its imports) but at the first run, which then completes; after a
    restart the API-defined workflow runs again the same way."""
    server = sandgate_server_factory(config=LAZY_CONFIG)
    env = WorkflowsEnv(server, "sqlite", "auto")
    assert "workflows.started" not in server.log_text()
    body = {
        "steps": [{"id": "a", "kind": "tool", "tool": "kv", "arguments": {"op": "get", "key": "k"}}]
    }
    put = httpx.put(f"{server.url}/v1/workflows/lazy", json=body, headers=env.headers())
    assert put.status_code == 200, put.text

    for attempt in ("first start", "after a restart"):
        assert "workflows.started" not in server.log_text().rsplit("=== start", 1)[-1], attempt
        started = env.start("lazy")
        env.events(started["id"])  # follows the run until it ends
        run = env.get(started["id"])
        assert run["state"] == "completed", (attempt, run)
        assert "workflows.started" in server.log_text().rsplit("=== start", 1)[-1], attempt
        server.restart()


def test_a_run_left_unfinished_starts_the_engine_with_the_server(
    sandgate_server_factory: ServerFactory, tmp_path: Path
) -> None:
    """No shared workflows, but a run of an API-defined one was under way when the server
    died: the next start launches DBOS at once (before any request) and recovers the run."""
    server = sandgate_server_factory(config=LAZY_CONFIG)
    env = WorkflowsEnv(server, "sqlite", "auto")
    gate = tmp_path / "open"
    body = {
        "steps": [{"id": "wait", "kind": "tool", "tool": "gate", "arguments": {"path": str(gate)}}]
    }
    put = httpx.put(f"{server.url}/v1/workflows/gated", json=body, headers=env.headers())
    assert put.status_code == 200, put.text
    started = env.start("gated")
    env.wait_for(started["id"], lambda r: env.step(r, "wait")["state"] == "running")

    server.kill()
    server.start()
    assert "workflows.started" in server.log_text().rsplit("=== start", 1)[-1]
    gate.touch()
    env.events(started["id"])
    run = env.get(started["id"])
    assert run["state"] == "completed", run
