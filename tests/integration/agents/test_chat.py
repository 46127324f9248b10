"""``sandgate chat`` in a real terminal (tmux): rendering, and an approval asked inline."""

from __future__ import annotations

import shlex
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator

import pytest

from tests.framework.model_server import code, text
from tests.integration.agents.conftest import AgentsEnv

pytestmark = pytest.mark.docker

WAIT_S = 90.0


class Terminal:
    def __init__(self, name: str) -> None:
        self.socket = f"sg-{name}"
        self.name = name

    def tmux(self, *args: str) -> str:
        return subprocess.run(
            ["tmux", "-L", self.socket, *args], capture_output=True, text=True, check=True
        ).stdout

    def screen(self) -> str:
        return self.tmux("capture-pane", "-p", "-J", "-S", "-200", "-t", self.name)

    def type(self, line: str) -> None:
        self.tmux("send-keys", "-t", self.name, "-l", line)
        self.tmux("send-keys", "-t", self.name, "Enter")

    def wait_for(self, needle: str, after: int = 0) -> str:
        """Polls the pane until ``needle`` appears at or after character ``after``."""
        deadline = time.monotonic() + WAIT_S
        while True:
            screen = self.screen()
            if needle in screen[after:]:
                return screen
            if time.monotonic() > deadline:
                raise AssertionError(f"{needle!r} never appeared; the screen:\n{screen}")
            time.sleep(0.1)


@pytest.fixture
def terminal(agents_env: AgentsEnv) -> Iterator[Terminal]:
    term = Terminal("chat" + uuid.uuid4().hex[:6])
    env = {
        k: v
        for k, v in agents_env.server.server_env.items()
        if k.startswith(("SANDGATE_", "OPENAI_", "ANTHROPIC_", "PATH", "HOME", "DOCKER"))
    }
    env["TERM"] = "xterm-256color"
    command = " ".join(
        [
            "env",
            *(shlex.quote(f"{k}={v}") for k, v in env.items()),
            shlex.quote(sys.executable),
            "-m sandgate chat --agent careful",
        ]
    )
    term.tmux("new-session", "-d", "-s", term.name, "-x", "160", "-y", "50", command + "; sleep 60")
    yield term
    subprocess.run(["tmux", "-L", term.socket, "kill-server"], check=False)


def test_chat_renders_code_and_asks_for_approval_inline(
    agents_env: AgentsEnv, terminal: Terminal
) -> None:
    agents_env.models.script(
        "careful-model",
        code("import sandgate_tools as tools\nprint('got', tools.kv.get(key='user:5'))"),
        text("**User 5** was read after your approval."),
    )
    terminal.wait_for("you>")
    terminal.type("Read user 5")
    screen = terminal.wait_for("approve this call? [y/N]")
    assert "approval needed" in screen and "kv get" in screen and "user:5" in screen
    assert "code (python)" in screen  # the code panel was drawn before the call
    mark = len(screen)
    terminal.type("y")
    screen = terminal.wait_for("User 5 was read after your approval.", after=mark - 200)
    assert "approved" in screen
    assert "allowed  kv get" in screen
    assert "exit 0" in screen
    terminal.type("/exit")
    screen = terminal.wait_for("continue with --session ses_")
