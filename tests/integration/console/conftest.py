"""A server for the console's browser tests, and a headless Chromium to drive it.

The browser is Debian's ``chromium`` driven by Playwright's Python API (no browser is
downloaded). The server has an agent whose model is the scripted model server, a policy that
asks a person before ``kv set`` for the ``approver`` agent, a metrics sample every second
(so charts fill within a test), and keys: a full one, a
read-only one (``--scope read``) and one of another team.
"""

from __future__ import annotations

import shutil
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import httpx
import pytest
from playwright.sync_api import Browser, Page, expect, sync_playwright

from tests.fixtures.server import RunningServer
from tests.framework.envd import CommandResult, create, run
from tests.framework.model_server import ScriptedModelServer

CONSOLE_CONFIG = """
agents:
  - id: console-agent
    model: console-model
    budgets: {max_steps: 3}
  - id: approver
secrets:
  CONSOLE_CANARY:
    env: SANDGATE_TEST_CONSOLE_CANARY
tools:
  - name: kv
    kind: builtin
policy:
  rules:
    - id: ask-before-writes
      effect: ask
      subject: {agent: approver}
      tool: kv
      action: set
      approval_timeout_s: 300
    - id: workflows-use-kv
      effect: allow
      subject: {metadata: {sandgate.workflow: "*"}}
      tool: kv
    - id: approver-reads
      effect: allow
      subject: {agent: [approver, console-agent]}
      tool: kv
      action: get
approvals:
  timeout_s: 300
metrics:
  interval_s: 1
"""
#: A secret's value: the approval page must show it redacted, never as is.
CANARY = "CONSOLE-CANARY-4b7d0e9a21c6"


@dataclass
class ConsoleEnv:
    server: RunningServer
    models: ScriptedModelServer
    #: The key of the server's default team (full), and a read-only one of the same team.
    full_key: str
    read_key: str
    #: A full key of another team.
    other_key: str

    def api(self, key: str | None = None) -> httpx.Client:
        return httpx.Client(
            base_url=self.server.url, headers={"X-API-Key": key or self.full_key}, timeout=120
        )

    def sandbox(self, **body: Any) -> dict[str, Any]:
        return create(self.server.url, self.full_key, timeout=600, **body)

    def run_in_thread(self, box: dict[str, Any], command: str) -> dict[str, Any]:
        """Runs ``command`` in the sandbox on a thread; ``result`` once ``thread`` ends."""
        outcome: dict[str, Any] = {}

        def target() -> None:
            result: CommandResult = run(
                self.server.url, box["sandboxID"], box["envdAccessToken"], command
            )
            outcome["result"] = result

        thread = threading.Thread(target=target, daemon=True)
        thread.start()
        outcome["thread"] = thread
        return outcome


def _key(server: RunningServer, *args: str) -> str:
    import json

    proc = server.cli("keys", "create", "--json", *args)
    line = [x for x in proc.stdout.splitlines() if x.startswith("{")][-1]
    return str(json.loads(line)["key"])


@pytest.fixture(scope="session")
def console_models() -> Iterator[ScriptedModelServer]:
    server = ScriptedModelServer().start()
    yield server
    server.stop()


@pytest.fixture(scope="session")
def console_env(
    runtime_server_factory: Callable[..., RunningServer], console_models: ScriptedModelServer
) -> ConsoleEnv:
    server = runtime_server_factory(
        config=CONSOLE_CONFIG,
        extra_env={
            "OPENAI_BASE_URL": console_models.openai_url,
            "OPENAI_API_KEY": "sk-test",
            "SANDGATE_TEST_CONSOLE_CANARY": CANARY,
        },
    )
    return ConsoleEnv(
        server=server,
        models=console_models,
        full_key=server.api_key,
        read_key=_key(server, "--name", "viewer", "--scope", "read"),
        other_key=_key(server, "--name", "other", "--team", "console-other-team"),
    )


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    """Module-scoped: Playwright's sync API keeps an event loop running while it is open, so
    it must close before the session's servers are torn down (their cleanup runs its own)."""
    chromium = shutil.which("chromium")
    if chromium is None:
        pytest.fail("Debian's chromium is not installed (scripts/test installs it)")
    with sync_playwright() as playwright:
        launched = playwright.chromium.launch(executable_path=chromium, args=["--no-sandbox"])
        yield launched
        launched.close()


@pytest.fixture
def page(browser: Browser) -> Iterator[Page]:
    context = browser.new_context(viewport={"width": 1280, "height": 860})
    context.set_default_timeout(60_000)
    opened = context.new_page()
    yield opened
    context.close()


def sign_in(page: Page, env: ConsoleEnv, key: str | None = None) -> None:
    """Signs in through the form and waits for the sandboxes page."""
    page.goto(f"{env.server.url}/ui/")
    page.fill("input[name=api_key]", key or env.full_key)
    page.click("button[type=submit]")
    expect(page.locator("h1")).to_have_text("Sandboxes")
