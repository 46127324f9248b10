"""Budgets, fallbacks, sessions, classic mode and autonomy, through the HTTP API."""

from __future__ import annotations

import itertools
import threading
from typing import Any

import httpx
import pytest

from tests.framework.model_server import Reply, code, error, text, tool_call
from tests.integration.agents.conftest import AgentsEnv

pytestmark = pytest.mark.docker


def test_max_steps_stops_a_looping_model(agents_env: AgentsEnv) -> None:
    counter = itertools.count()
    agents_env.models.script(
        "looper-model",
        Reply(repeat=True, respond=lambda _: code(f"print({next(counter)})")),
    )
    result = agents_env.run("looper", "Loop forever.")
    assert result.run["state"] == "stopped"
    assert result.run["stop_reason"] == "max_steps"
    assert "budgets.max_steps" in result.run["error"]
    assert result.run["usage"]["model_calls"] == 3
    assert len(result.of("code.completed")) == 3
    assert result.types()[-1] == "run.failed"


def test_repeated_identical_action_stops_the_run(agents_env: AgentsEnv) -> None:
    agents_env.models.script("repeater-model", code("print('same')", repeat=True))
    result = agents_env.run("repeater", "Do it again.")
    assert result.run["stop_reason"] == "repeated_action"
    assert result.run["usage"]["model_calls"] == 3


def test_token_budget_stops_the_run(agents_env: AgentsEnv) -> None:
    agents_env.models.script("spender-model", code("print(1)", repeat=True))
    result = agents_env.run("spender", "Spend.")
    assert result.run["stop_reason"] == "max_tokens"
    assert result.run["usage"]["model_calls"] == 1
    assert "budgets.max_tokens" in result.run["error"]


def test_rate_limited_model_falls_back_and_cools_down(agents_env: AgentsEnv) -> None:
    models = agents_env.models
    models.script("flaky-model", error(429, repeat=True))
    models.script("backup-model", text("answer from the fallback", repeat=True))
    result = agents_env.run("fallback", "Hello?")
    assert result.run["state"] == "completed", result.run
    assert result.run["answer"] == "answer from the fallback"
    (step,) = result.of("text.delta")
    attempts = [(a["provider"], a["model"], a["status"]) for a in step["attempts"]]
    assert attempts == [
        ("openai", "flaky-model", 429),
        ("openai", "flaky-model", 429),  # retries: 1
        ("anthropic", "backup-model", 200),
    ]
    assert "rate limited" in step["attempts"][0]["error"]
    assert models.for_model("backup-model")[0].api == "anthropic"

    # Another session: the flaky model is cooling down, so it is not asked at all.
    asked = len(models.for_model("flaky-model"))
    again = agents_env.run("fallback", "Hello again?")
    assert again.run["state"] == "completed"
    assert len(models.for_model("flaky-model")) == asked
    assert "cooling down" not in (again.run["error"] or "")


def test_all_models_failing_is_reported_in_plain_words(agents_env: AgentsEnv) -> None:
    models = agents_env.models
    models.script("flaky-model", error(429, repeat=True))
    models.script("backup-model", error(401, repeat=True))
    result = agents_env.run("fallback", "Anyone?")
    assert result.run["state"] == "failed"
    assert result.run["stop_reason"] == "model_unavailable"
    assert "the API key was refused" in result.run["error"]
    assert "anthropic/backup-model" in result.run["error"]


def test_session_keeps_python_state_and_allows_one_run_at_a_time(agents_env: AgentsEnv) -> None:
    release = threading.Event()

    def slow(_: dict[str, Any]) -> Reply:
        release.wait(60)
        return code("x = 41")

    agents_env.models.script(
        "stateful-model", Reply(respond=slow), text("set"), code("print(x + 1)"), text("done")
    )
    # An explicit session keeps its sandbox (and Python process) between runs.
    opened = httpx.post(
        f"{agents_env.server.url}/v1/agents/stateful/sessions", headers=agents_env.headers()
    )
    assert opened.status_code == 201 and opened.json()["ephemeral"] is False
    first = agents_env.start("stateful", "Set x.", opened.json()["id"])
    busy = httpx.post(
        f"{agents_env.server.url}/v1/agents/stateful/runs",
        json={"message": "Again", "session_id": first["session_id"]},
        headers=agents_env.headers(),
    )
    release.set()
    assert busy.status_code == 409, busy.text
    assert "already has a run in progress" in busy.json()["message"]
    agents_env.events(first["id"])

    # The second run of the session sees the variable the first one set, after a restart.
    agents_env.server.restart()
    second = agents_env.run("stateful", "Print x + 1.", first["session_id"])
    assert second.run["state"] == "completed", second.run
    assert second.of("code.completed")[0]["stdout"].strip() == "42"
    last_request = agents_env.models.for_model("stateful-model")[-1].body["messages"]
    assert any(m.get("content") == "Set x." for m in last_request)  # history resumed


def test_classic_mode_makes_one_native_tool_call_per_turn(agents_env: AgentsEnv) -> None:
    agents_env.models.script(
        "classic-model",
        tool_call("kv", {"op": "get", "key": "user:7"}),
        tool_call("kv", {"op": "set", "key": "user:7", "value": 1}),
        text("user 7 read; the write was denied"),
    )
    result = agents_env.run("classic", "Read user 7.")
    assert result.run["state"] == "completed", result.run
    started = result.of("tool.started")
    assert [s["arguments"]["op"] for s in started] == ["get", "set"]
    completed = result.of("tool.completed")
    assert [c["outcome"] for c in completed] == ["allowed", "denied"]
    assert all(c["audit_seq"] for c in completed)
    second, third = agents_env.models.for_model("classic-model")[1:]
    assert second.body["tools"][0]["function"]["name"] == "kv"
    tool_reply = second.body["messages"][-1]
    assert tool_reply["role"] == "tool" and '"ok": true' in tool_reply["content"]
    assert "policy_denied" in third.body["messages"][-1]["content"]


def test_suggest_autonomy_asks_before_each_allowed_call(agents_env: AgentsEnv) -> None:
    agents_env.models.script(
        "careful-model",
        code(
            "import sandgate_tools as tools\n"
            "tools.kv.get(key='user:3')\nprint('first: ok')\n"
            "try:\n    tools.kv.get(key='user:4')\n"
            "except tools.ToolError as exc:\n    print('second:', exc.code)"
        ),
        text("done"),
    )
    started = agents_env.start("careful", "Read users 3 and 4.")
    url, headers = agents_env.server.url, agents_env.headers()
    decided: list[str] = []
    with httpx.stream(
        "GET", f"{url}/v1/runs/{started['id']}/events", headers=headers, timeout=120
    ) as response:
        for line in response.iter_lines():
            if line.startswith("data: ") and '"approval": "apr_' in line:
                approval = line.split('"approval": "', 1)[1].split('"', 1)[0]
                verdict = "approve" if not decided else "deny"
                answer = httpx.post(f"{url}/v1/approvals/{approval}/{verdict}", headers=headers)
                assert answer.status_code == 200, answer.text
                decided.append(verdict)
            if line.startswith("event: run.") and line != "event: run.started":
                break
    run = httpx.get(f"{url}/v1/runs/{started['id']}?trace=true", headers=headers).json()
    assert decided == ["approve", "deny"]
    stdout = next(e for e in run["trace"] if e["type"] == "code.completed")["data"]["stdout"]
    assert stdout.split() == ["first:", "ok", "second:", "approval_denied"]
