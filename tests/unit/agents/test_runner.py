"""The agent runner's own bookkeeping (runs, sessions, stops, the run's record and audit
event) over the services of ``sandgate.wiring``, built on the in-memory runtime of
``tests/fixtures/fake_runtime.py`` with a real SQLite store and audit log, and the scripted
model server. No model reply here runs code: code in a sandbox is tested against the real
runtimes in tests/integration/agents."""

from __future__ import annotations

import asyncio
import hashlib
import shutil
import tempfile
import threading
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from sandgate.access import Principal, create_api_key
from sandgate.agents import RunState
from sandgate.config import load_config
from sandgate.errors import Conflict, RuntimeUnavailable
from sandgate.sandboxes import SandboxState
from sandgate.sandboxes.catalog import register
from sandgate.store import AgentRun, Store
from sandgate.templates import BuiltTemplate
from sandgate.wiring import Services, build_services
from tests.fixtures.fake_runtime import FakeRuntime
from tests.framework.model_server import Reply, ScriptedModelServer, text

#: A reply the runner reads as neither code nor an answer (a code block in no known
#: language): the model is told so and asked again, and nothing runs in the sandbox.
_UNREADABLE = text("```cobol\nDISPLAY 'HI'.\n```")

_CONFIG = """\
providers:
  scripted:
    kind: openai
    base_url: {url}
    api_key_env: SANDGATE_TEST_MODEL_KEY
    retries: 0
    backoff_s: 0
agents:
  - id: helper
    provider: scripted
    model: {model}
    budgets:
      max_steps: {max_steps}
      max_tokens: {max_tokens}
"""


@dataclass
class Harness:
    services: Services
    runtime: FakeRuntime
    models: ScriptedModelServer
    model: str
    principal: Principal

    async def run(self, message: str, session_id: str | None = None) -> AgentRun:
        """Submits ``message`` to the agent and returns the run once it is final."""
        runner = self.services.agents
        submitted = await runner.submit(self.principal, "helper", message, session_id)
        return await runner.wait(submitted.id)

    def events(self, run_id: str) -> list[str]:
        return [event.type for event in self.services.agents.trace(run_id)]

    def sandbox_state(self, sandbox_id: str) -> str | None:
        row = self.services.store.sandbox(sandbox_id)
        return row.state if row is not None else None


@pytest.fixture(scope="module")
def models() -> Iterator[ScriptedModelServer]:
    server = ScriptedModelServer().start()
    yield server
    server.stop()


@pytest.fixture
def home(monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    monkeypatch.setenv("SANDGATE_TEST_MODEL_KEY", "sk-test")
    # Short: the sockets under it must fit a Unix socket address (108 bytes).
    path = Path(tempfile.mkdtemp(prefix="sgrun", dir="/tmp"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


def _run(
    home: Path,
    models: ScriptedModelServer,
    request: pytest.FixtureRequest,
    body: Callable[[Harness], Awaitable[None]],
    *,
    max_steps: int = 10,
    max_tokens: int = 200_000,
) -> list[dict[str, Any]]:
    """Runs ``body`` against fresh services; returns the audit log's records once closed."""
    model = f"model-{request.node.name}"  # each test its own reply queue
    (home / "sandgate.yaml").write_text(
        _CONFIG.format(
            url=models.openai_url, model=model, max_steps=max_steps, max_tokens=max_tokens
        )
    )
    config = load_config(home / "sandgate.yaml", environ={"SANDGATE_HOME": str(home)})
    store = Store.open(config.store_url)
    register(store, BuiltTemplate("base", "sandgate/template-base:latest", "sha256:x", "d"))
    key, _ = create_api_key(store, "t", "k")
    runtime = FakeRuntime()
    services = build_services(config, store, runtime)
    harness = Harness(services, runtime, models, model, Principal(key.team_id, key.id))

    async def main() -> None:
        try:
            await body(harness)
        finally:
            for row in store.live_sandboxes():
                await services.sandboxes.kill_any(row.id)
            await services.agents.stop()
            await services.sandboxes.stop()
            await services.close()

    asyncio.run(main())
    return list(services.gateway.audit.records())


def _agent_runs(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [r for r in records if r.get("event") == "agent.run"]


def test_a_final_answer_completes_the_run_and_releases_its_sandbox(
    home: Path, models: ScriptedModelServer, request: pytest.FixtureRequest
) -> None:
    seen: dict[str, Any] = {}

    async def body(h: Harness) -> None:
        h.models.script(h.model, text("The answer is 42."))
        run = await h.run("What is six times seven?")
        seen["run"] = run
        assert run.state == RunState.COMPLETED.value
        assert (run.stop_reason, run.answer, run.error) == (
            "final_answer",
            "The answer is 42.",
            None,
        )
        assert (run.steps, run.model_calls) == (1, 1)
        assert run.prompt_tokens > 0 and run.completion_tokens > 0
        # The run had a sandbox of its own, released before its end was told.
        assert run.sandbox_id is not None
        assert h.runtime.created == [run.sandbox_id] == h.runtime.killed
        assert h.sandbox_state(run.sandbox_id) == SandboxState.KILLED.value
        events = h.events(run.id)
        assert events[0] == "run.started" and events[-1] == "run.completed"
        assert "model.request" in events
        session = h.services.agents.session(h.principal, run.session_id)
        assert [m["role"] for m in session.messages] == ["user", "assistant"]
        assert session.sandbox_id is None
        # The model was asked once, as the agent, with the message last.
        [asked] = h.models.for_model(h.model)
        assert asked.body["messages"][-1]["content"] == "What is six times seven?"

    records = _run(home, models, request, body)
    run = seen["run"]
    [audited] = _agent_runs(records)
    assert audited["run"] == run.id and audited["session"] == run.session_id
    assert audited["sandbox"] == run.sandbox_id
    assert audited["subject"] == {"team": run.team_id, "agent": "helper"}
    assert (audited["outcome"], audited["stop_reason"]) == ("completed", "final_answer")
    digest = hashlib.sha256(b"What is six times seven?").hexdigest()
    assert audited["message_digest"] == f"sha256:{digest}"
    assert audited["usage"]["model_calls"] == 1 and audited["usage"]["steps"] == 1
    # The message itself is never audited, only its digest.
    assert "six times seven" not in str(audited)


@pytest.mark.parametrize(
    ("budgets", "stop_reason", "model_calls"),
    [
        ({"max_steps": 2}, "max_steps", 2),
        ({"max_tokens": 1}, "max_tokens", 1),
    ],
)
def test_a_budget_stops_a_run_whose_model_never_answers(
    home: Path,
    models: ScriptedModelServer,
    request: pytest.FixtureRequest,
    budgets: dict[str, int],
    stop_reason: str,
    model_calls: int,
) -> None:
    seen: dict[str, Any] = {}

    async def body(h: Harness) -> None:
        h.models.script(h.model, Reply(text=_UNREADABLE.text, repeat=True))
        run = await h.run("Loop forever.")
        seen["run"] = run
        assert run.state == RunState.STOPPED.value
        assert run.stop_reason == stop_reason
        assert f"budgets.{stop_reason}" in (run.error or "")  # names the setting to raise
        assert run.answer is None
        # Stopped before asking again: no model call beyond the budget.
        assert run.model_calls == model_calls == len(h.models.for_model(h.model))
        assert h.events(run.id)[-1] == "run.failed"
        assert run.sandbox_id is not None and h.runtime.killed == [run.sandbox_id]

    records = _run(home, models, request, body, **budgets)
    [audited] = _agent_runs(records)
    assert (audited["outcome"], audited["stop_reason"]) == ("stopped", stop_reason)
    assert audited["usage"]["model_calls"] == model_calls


def test_a_sandbox_that_cannot_be_created_fails_the_run_with_its_error(
    home: Path, models: ScriptedModelServer, request: pytest.FixtureRequest
) -> None:
    seen: dict[str, Any] = {}

    async def body(h: Harness) -> None:
        h.models.script(h.model, text("never asked"))
        h.runtime.fail_create = RuntimeUnavailable("the engine is down; start it")
        run = await h.run("Hello?")
        seen["run"] = run
        assert run.state == RunState.FAILED.value
        assert run.stop_reason == "runtime_unavailable"  # the error's stable code
        assert run.error == "the engine is down; start it"
        assert run.sandbox_id is None and run.model_calls == 0
        assert h.models.for_model(h.model) == []  # no model call without a sandbox
        assert h.runtime.sandboxes == {} and h.services.store.live_sandboxes() == []
        trace = h.services.agents.trace(run.id)
        assert trace[-1].type == "run.failed"
        assert trace[-1].data["error"] == "the engine is down; start it"
        # The session is left usable: the next run, once the engine is back, completes.
        h.runtime.fail_create = None
        again = await h.run("Hello again?")
        assert again.state == RunState.COMPLETED.value and again.answer == "never asked"

    records = _run(home, models, request, body)
    first = _agent_runs(records)[0]
    assert first["run"] == seen["run"].id
    assert (first["outcome"], first["stop_reason"], first["sandbox"]) == (
        "failed",
        "runtime_unavailable",
        None,
    )


def test_a_session_keeps_its_sandbox_and_history_between_runs(
    home: Path, models: ScriptedModelServer, request: pytest.FixtureRequest
) -> None:
    async def body(h: Harness) -> None:
        runner = h.services.agents
        h.models.script(h.model, text("Noted: blue."), text("You said blue."))
        session = runner.open_session(h.principal, "helper")
        first = await h.run("Remember: blue.", session.id)
        second = await h.run("What did I say?", session.id)
        assert (first.state, second.state) == (RunState.COMPLETED.value,) * 2
        # One sandbox for both runs, kept after each (the session is not ephemeral).
        assert first.sandbox_id is not None and second.sandbox_id == first.sandbox_id
        assert h.runtime.created == [first.sandbox_id] and h.runtime.killed == []
        # The second request carried the first exchange.
        contents = [m["content"] for m in h.models.for_model(h.model)[1].body["messages"]]
        assert contents[-3:] == ["Remember: blue.", "Noted: blue.", "What did I say?"]
        ended = await runner.end_session(h.principal, session.id)
        assert ended.sandbox_id is None and len(ended.messages) == 4
        assert h.runtime.killed == [first.sandbox_id]

    _run(home, models, request, body)


def test_a_session_takes_one_run_at_a_time_and_a_cancel_ends_it(
    home: Path, models: ScriptedModelServer, request: pytest.FixtureRequest
) -> None:
    asked, release = threading.Event(), threading.Event()

    def held(_: dict[str, Any]) -> Reply:
        asked.set()
        release.wait(timeout=60)  # until the test has cancelled the run
        return text("too late")

    async def body(h: Harness) -> None:
        runner = h.services.agents
        h.models.script(h.model, Reply(respond=held))
        session = runner.open_session(h.principal, "helper")
        run = await runner.submit(h.principal, "helper", "Take your time.", session.id)
        try:
            assert await asyncio.to_thread(asked.wait, 60)  # the model call is in flight
            with pytest.raises(Conflict, match="already has a run in progress"):
                await runner.submit(h.principal, "helper", "And this?", session.id)
            with pytest.raises(Conflict, match="has a run in progress; cancel it first"):
                await runner.end_session(h.principal, session.id)
            cancelled = await runner.cancel(h.principal, run.id, by="tester")
        finally:
            release.set()
        assert cancelled.state == RunState.CANCELLED.value
        assert (cancelled.stop_reason, cancelled.error) == ("cancelled", "cancelled by tester")
        assert h.events(run.id)[-1] == "run.failed"
        with pytest.raises(Conflict, match="it is cancelled"):
            await runner.cancel(h.principal, run.id, by="tester")
        # The session takes runs again, in the sandbox it kept.
        h.models.script(h.model, text("Done."))
        after = await h.run("Now?", session.id)
        assert after.state == RunState.COMPLETED.value
        assert after.sandbox_id == cancelled.sandbox_id and len(h.runtime.created) == 1

    _run(home, models, request, body)
