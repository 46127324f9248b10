"""The agent runner's pure parts: actions, stops, autonomy as policy, providers and router
(against the scripted model server)."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from datetime import UTC, datetime

import pytest

from sandgate.agents.actions import CallTools, FinalAnswer, Malformed, RunCode, parse_action
from sandgate.agents.autonomy import with_autonomy
from sandgate.agents.providers import Cooldowns, Message, ModelRequest, ModelRouter, ToolCall
from sandgate.agents.providers import open_provider as make_provider
from sandgate.agents.stops import Progress, default_checks, first_stop
from sandgate.config import AgentBudgets, Config, ModelChoice, ProviderConfig
from sandgate.errors import ModelUnavailable
from sandgate.policy import PolicyEngine, Subject
from tests.framework.model_server import ScriptedModelServer, error, text, tool_call


@pytest.fixture(scope="module")
def models() -> Iterator[ScriptedModelServer]:
    server = ScriptedModelServer().start()
    yield server
    server.stop()


def test_parse_action() -> None:
    assert parse_action("All done.", (), "python") == FinalAnswer("All done.")
    assert parse_action("x\n```py\nprint(1)\n```", (), "python") == RunCode("python", "print(1)\n")
    assert parse_action("```\nls\n```", (), "bash") == RunCode("bash", "ls\n")
    assert isinstance(parse_action("```ruby\nputs 1\n```", (), "python"), Malformed)
    assert isinstance(parse_action("```py\n1\n```\n```py\n2\n```", (), "python"), Malformed)
    call = ToolCall("c1", "kv", {"op": "get"})
    assert parse_action("```py\n1\n```", (call,), "python") == CallTools((call,))


def test_stop_checks_name_the_budget() -> None:
    progress = Progress(AgentBudgets(max_steps=2, max_tokens=100))
    checks = default_checks()
    assert first_stop(checks, progress) is None
    progress.usage.prompt_tokens = 100
    stop = first_stop(checks, progress)
    assert stop is not None and stop.name == "max_tokens"
    assert "budgets.max_tokens" in stop.message(progress)
    progress.usage.prompt_tokens, progress.actions = 0, ["a", "a", "a"]
    assert first_stop(checks, progress).name == "repeated_action"  # type: ignore[union-attr]


def test_autonomy_makes_allowed_calls_ask_and_keeps_denies() -> None:
    config = Config.model_validate(
        {
            "agents": [{"id": "careful", "autonomy": "suggest"}, {"id": "free"}],
            "tools": [{"name": "kv", "kind": "builtin"}],
            "policy": {
                "rules": [
                    {"id": "no-set", "effect": "deny", "tool": "kv", "action": "set"},
                    {"id": "read", "effect": "allow", "tool": "kv"},
                ]
            },
        }
    )
    engine = PolicyEngine(with_autonomy(config).policy)
    now = datetime.now(UTC)

    def decide(agent: str, action: str) -> tuple[str, str]:
        subject = Subject(sandbox_id="s", team_id="t", agent=agent)
        decision = engine.decide(subject, "kv", action, {}, now)
        return decision.effect, decision.rule_id

    assert decide("careful", "get") == ("ask", "read@suggest:careful")
    assert decide("careful", "set") == ("deny", "no-set@suggest:careful")
    assert decide("free", "get") == ("allow", "read")


@pytest.mark.parametrize("kind", ["openai", "anthropic"])
def test_providers_translate_text_tool_calls_and_usage(
    models: ScriptedModelServer, kind: str
) -> None:
    url = models.openai_url if kind == "openai" else models.anthropic_url
    provider = make_provider(ProviderConfig(kind=kind, base_url=url), "key")  # type: ignore[arg-type]
    model = f"unit-{kind}"
    models.script(model, tool_call("kv", {"op": "get", "key": "a"}), text("done"))
    request = ModelRequest(model, "system", (Message("user", "hi"),), 100)

    async def scenario() -> None:
        first = await provider.complete(request)
        assert first.tool_calls[0].name == "kv" and first.tool_calls[0].arguments["key"] == "a"
        follow = ModelRequest(
            model,
            "system",
            (
                Message("user", "hi"),
                Message("assistant", "", first.tool_calls),
                Message("tool", '{"ok": true}', tool_call_id=first.tool_calls[0].id),
            ),
            100,
        )
        second = await provider.complete(follow)
        assert second.text == "done"
        recorded = models.for_model(model)[-1]
        assert (second.prompt_tokens, second.completion_tokens) == (
            recorded.usage["prompt"],
            recorded.usage["completion"],
        )
        await provider.close()

    asyncio.run(scenario())


def test_router_retries_falls_back_and_cools_down(models: ScriptedModelServer) -> None:
    settings = {
        "openai": ProviderConfig(
            kind="openai", base_url=models.openai_url, retries=1, backoff_s=0, cooldown_s=60
        )
    }
    providers = {"openai": make_provider(settings["openai"], "key")}
    router = ModelRouter(providers, settings, Cooldowns())
    chain = [ModelChoice(model="r-busy"), ModelChoice(model="r-ok")]
    models.script("r-busy", error(503, repeat=True))
    models.script("r-ok", text("hello", repeat=True))
    request = ModelRequest("", "s", (Message("user", "x"),), 10)

    async def scenario() -> None:
        attempts: list = []  # type: ignore[type-arg]
        choice, reply = await router.complete(chain, request, attempts)
        assert (choice.model, reply.text) == ("r-ok", "hello")
        assert [a.status for a in attempts] == [503, 503, 200]
        attempts = []
        await router.complete(chain, request, attempts)
        assert [a.model for a in attempts] == ["r-ok"]  # r-busy is cooling down
        models.script("r-ok", error(400, repeat=True))
        with pytest.raises(ModelUnavailable, match=r"cooling down.*request rejected"):
            await router.complete(chain, request, [])
        await providers["openai"].close()

    asyncio.run(scenario())
