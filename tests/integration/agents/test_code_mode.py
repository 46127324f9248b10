"""Code-mode agent runs end to end: scripted model → real sandbox → real tools → audit."""

from __future__ import annotations

import httpx
import pytest

from tests.framework.model_server import code, text
from tests.integration.agents.conftest import EXAMPLE, AgentsEnv

pytestmark = pytest.mark.docker


@pytest.fixture(scope="module")
def seeded(agents_env: AgentsEnv) -> None:
    """50 users in kv, written by the `seeder` agent running examples/code-mode/seed.py."""
    agents_env.models.script(
        "seeder-model", code((EXAMPLE / "seed.py").read_text()), text("Seeded.")
    )
    result = agents_env.run("seeder", "Seed the users.")
    assert result.run["state"] == "completed", result.run
    assert "seeded 50 users" in result.of("code.completed")[0]["stdout"]


def test_example_task_completes_in_one_code_turn(agents_env: AgentsEnv, seeded: None) -> None:
    models = agents_env.models
    models.script(
        "analyst-model",
        code((EXAMPLE / "analyse_users.py").read_text()),
        text("There are 50 users; the write was refused by policy."),
    )
    result = agents_env.run("data-analyst", "Analyse our 50 users and save a report.")

    run = result.run
    assert run["state"] == "completed", run
    assert run["answer"] == "There are 50 users; the write was refused by policy."
    assert run["usage"]["model_calls"] == 2
    (executed,) = result.of("code.completed")
    assert executed["exit_code"] == 0, executed
    assert "users: 50 (kv lists 50 user keys)" in executed["stdout"]
    assert "write refused as expected: policy_denied" in executed["stdout"]

    calls = result.of("tool.completed")
    outcomes = sorted((c["action"], c["outcome"]) for c in calls)
    assert outcomes.count(("get", "allowed")) == 50
    assert ("list", "allowed") in outcomes
    denied = [c for c in calls if c["outcome"] == "denied"]
    assert len(denied) == 1 and denied[0]["action"] == "set"
    assert denied[0]["rule"] == "analyst-never-writes"
    assert run["usage"]["tool_calls"] == 52

    # The denied write is in the audit log under the audit id the run reported.
    audit = httpx.get(
        f"{agents_env.server.url}/v1/audit",
        params={"outcome": "denied", "tool": "kv"},
        headers=agents_env.headers(),
    ).json()["entries"]
    assert denied[0]["audit_seq"] in [e["seq"] for e in audit]

    # SSE order: started, model, code (with its tool calls), model, completed.
    types = result.types()
    assert types[:3] == ["run.started", "text.delta", "code.started"]
    assert types[-3:] == ["code.completed", "text.delta", "run.completed"]
    assert set(types[3:-3]) == {"tool.completed"}

    first, second = models.for_model("analyst-model")
    system = first.body["messages"][0]["content"]
    assert "tools.kv.get(*, key: str" in system
    assert "user-report: How to format a report about users" in system
    assert "Put totals first" not in system  # skill bodies stay out of the prompt
    observation = second.body["messages"][-1]["content"]
    assert "Exit code: 0" in observation and "users: 50" in observation


def test_trace_keeps_every_hop(agents_env: AgentsEnv, seeded: None) -> None:
    agents_env.models.script(
        "analyst-model",
        code("print(open('/run/sandgate/skills/user-report/SKILL.md').read())"),
        text("Read the skill."),
    )
    result = agents_env.run("data-analyst", "Read the user-report skill.")
    assert "Put totals first" in result.of("code.completed")[0]["stdout"]
    trace = result.run["trace"]
    kinds = [e["type"] for e in trace]
    assert kinds.count("model.request") == 2 and kinds.count("text.delta") == 2
    model_step = next(e["data"] for e in trace if e["type"] == "text.delta")
    assert model_step["prompt_tokens"] > 0 and model_step["completion_tokens"] > 0
    assert model_step["attempts"][0]["provider"] == "openai"
    assert result.run["usage"]["prompt_tokens"] == sum(
        r.usage["prompt"] for r in agents_env.models.for_model("analyst-model")[-2:]
    )

    shown = agents_env.server.cli("runs", "show", result.run["id"])
    assert "open('/run/sandgate/skills/user-report/SKILL.md')" in shown.stdout
    assert "completed" in shown.stdout
