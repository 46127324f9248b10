"""A server with a Telegram channel, on each runtime, talking to the scripted Bot API server.

One ``sandgate serve`` per runtime, one scripted model server and one scripted Bot API server
per runtime. Users (Telegram ids): ``HELPER_USER`` and ``LONG_USER`` talk to the plain agent
in their private chats; ``APPROVER`` talks to the careful agent (every tool call asks) in
``CAREFUL_CHAT`` and may decide its approvals; ``BYSTANDER`` is allowed to talk but approves
nothing; ``STRANGER`` is allowed nothing.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import pytest

from tests.fixtures.server import RunningServer
from tests.framework.bot_api import ScriptedBotApi
from tests.framework.model_server import ScriptedModelServer

TOKEN = "700000001:AAH-scripted-bot-token-never-logged"
HELPER_USER = 111
LONG_USER = 444
APPROVER = 222
CAREFUL_CHAT = APPROVER
BYSTANDER = 333
STRANGER = 999
# The ids above, written into CONFIG below.

CONFIG = """
agents:
  - id: helper
    model: tg-helper-model
  - id: careful
    model: tg-careful-model
    autonomy: suggest
providers:
  openai: {kind: openai, retries: 0, backoff_s: 0.01}
tools:
  - name: kv
    kind: builtin
policy:
  rules:
    - id: careful-reads-users
      effect: allow
      subject: {agent: careful}
      tool: kv
      action: get
      args:
        key: {glob: "user:*"}
    - id: helper-writes-ask-briefly
      effect: ask
      subject: {agent: helper}
      tool: kv
      action: set
      approval_timeout_s: 1
approvals:
  timeout_s: 120
channels:
  telegram:
    token_env: SG_TEST_TELEGRAM_TOKEN
    api_url: "{api_url}"
    agent: helper
    chats: [{id: 222, agent: careful}]
    allowed_users: [111, 444, 222, 333]
    approvers: {careful: [222]}
    poll_timeout_s: 5
"""


@dataclass
class TelegramEnv:
    server: RunningServer
    bot: ScriptedBotApi
    models: ScriptedModelServer

    def user_texts(self, model: str) -> list[str]:
        """The last user message of each request the agent sent to ``model``."""
        found = []
        for request in self.models.for_model(model):
            users = [m for m in request.body.get("messages", []) if m.get("role") == "user"]
            if users:
                content = users[-1]["content"]
                found.append(content if isinstance(content, str) else json.dumps(content))
        return found


@pytest.fixture(scope="session")
def telegram_models() -> Iterator[ScriptedModelServer]:
    server = ScriptedModelServer().start()
    yield server
    server.stop()


@pytest.fixture(scope="session")
def telegram_env(
    runtime: str,
    runtime_server_factory: Callable[..., RunningServer],
    telegram_models: ScriptedModelServer,
) -> Iterator[TelegramEnv]:
    bot = ScriptedBotApi(TOKEN).start()
    server = runtime_server_factory(
        config=CONFIG.replace("{api_url}", bot.url),
        extra_env={
            "OPENAI_BASE_URL": telegram_models.openai_url,
            "OPENAI_API_KEY": "sk-test",
            "SG_TEST_TELEGRAM_TOKEN": TOKEN,
        },
    )
    bot.wait_for(lambda b: b.of("getUpdates") or b.of("getMe"), what="the bot connects")
    yield TelegramEnv(server, bot, telegram_models)
    bot.stop()
