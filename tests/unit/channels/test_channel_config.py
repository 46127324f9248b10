"""``channels.telegram``: validated with the rest of the file, the token never in it."""

from __future__ import annotations

from pathlib import Path

import pytest

from sandgate.config import load_config
from sandgate.errors import ConfigError

AGENTS = "agents: [{id: helper, model: m}, {id: careful, model: m}]\n"


def _load(tmp_path: Path, telegram: str, extra: str = "") -> object:
    path = tmp_path / "sandgate.yaml"
    path.write_text(AGENTS + extra + "channels:\n  telegram:\n" + telegram)
    return load_config(path, environ={}).channels.telegram


def test_a_minimal_bot_takes_its_token_from_the_environment(tmp_path: Path) -> None:
    telegram = _load(tmp_path, "    agent: helper\n    allowed_users: [1]\n")
    assert telegram is not None
    assert telegram.token_env == "TELEGRAM_BOT_TOKEN"  # type: ignore[attr-defined]
    assert telegram.api_url == "https://api.telegram.org"  # type: ignore[attr-defined]
    assert load_config(None, environ={}).channels.telegram is None  # off unless configured


def test_chats_pick_their_agent(tmp_path: Path) -> None:
    telegram = _load(
        tmp_path,
        "    agent: helper\n    allowed_users: [1]\n"
        "    chats: [{id: -100, agent: careful}]\n    api_url: http://127.0.0.1:9/\n",
    )
    assert telegram.agent_for(-100) == "careful"  # type: ignore[attr-defined]
    assert telegram.agent_for(5) == "helper"  # type: ignore[attr-defined]
    assert telegram.api_url == "http://127.0.0.1:9"  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    ("telegram", "message"),
    [
        ("    agent: nobody\n    allowed_users: [1]\n", "undeclared agents: nobody"),
        (
            "    agent: helper\n    allowed_users: [1]\n    approvers: {ghost: [1]}\n",
            "undeclared agents: ghost",
        ),
        ("    agent: helper\n    allowed_users: []\n", r"allowed_users"),
        ("    agent: helper\n    allowed_users: [1]\n    token: abc\n", r"telegram\.token"),
        (
            "    agent: helper\n    allowed_users: [1]\n    token_secret: tg\n",
            "token_secret 'tg' is not declared",
        ),
        (
            "    agent: helper\n    allowed_users: [1]\n    api_url: ftp://x\n",
            "api_url",
        ),
        (
            "    agent: helper\n    allowed_users: ['1']\n",
            "allowed_users",
        ),
    ],
)
def test_mistakes_are_named(tmp_path: Path, telegram: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        _load(tmp_path, telegram)
