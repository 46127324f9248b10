"""Deny-overrides through the whole stack: a real server, a real sandbox on each runtime, the
tool called from inside it, the decision read back from the audit log."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import pytest

from tests.fixtures.server import RunningServer
from tests.framework.envd import create, run

# The allow comes first and matches everything; the denies come after it and still win.
CONFIG = """
agents:
  - id: worker
tools:
  - {name: kv, kind: builtin}
  - name: shout
    kind: exec
    command: ["/bin/echo", "{text}"]
    parameters: {type: object, properties: {text: {type: string}}, required: [text]}
policy:
  rules:
    - {id: worker-all, effect: allow, subject: {agent: worker}, tool: "*"}
    - {id: no-secret-keys, effect: deny, tool: kv, args: {key: {matches: "^secret:"}}}
    - {id: no-runaway-a, effect: deny, tool: shout, args: {text: {matches: "(a+)+b$"}}}
"""


@pytest.fixture(scope="module")
def policy_server(runtime_server_factory: Callable[..., RunningServer]) -> RunningServer:
    return runtime_server_factory(config=CONFIG)


@pytest.fixture
def worker(policy_server: RunningServer) -> Iterator[tuple[str, Callable[[str], Any]]]:
    box = create(
        policy_server.url,
        policy_server.api_key,
        timeout=300,
        metadata={"sandgate.agent": "worker"},
    )
    sandbox_id, token = box["sandboxID"], box["envdAccessToken"]
    yield sandbox_id, lambda command: run(policy_server.url, sandbox_id, token, command)
    httpx.delete(
        f"{policy_server.url}/sandboxes/{sandbox_id}",
        headers={"X-API-Key": policy_server.api_key},
    )


def test_policy_deny_after_allow_wins_and_is_audited_with_its_rule(
    policy_server: RunningServer, worker: tuple[str, Callable[[str], Any]]
) -> None:
    sandbox_id, sh = worker
    assert sh("kv set plain:1 1").exit_code == 0
    denied = sh("kv set secret:1 1")
    assert denied.exit_code == 1
    assert "policy_denied" in denied.stderr and "no-secret-keys" in denied.stderr
    # A 50 000-character argument against a backtracking-bomb pattern: decided both ways.
    script = (
        "import sandgate_tools as t\n"
        "r = t.shout(text='a' * 50000 + '!')\n"
        "print(r.count('a'), r.strip()[-1])\n"
        "try: t.shout(text='a' * 50000 + 'b')\n"
        "except t.ToolError as e: print(e.code, 'no-runaway-a' in str(e))\n"
    )
    bomb = sh(f'python3 -c "{script}"')
    assert bomb.stdout.split() == ["50000", "!", "policy_denied", "True"], bomb.stderr
    out = policy_server.cli("audit", "query", "--json", "--sandbox", sandbox_id).stdout
    rows = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
    calls = [(r["tool"], r["action"], r["outcome"], r["rule"]) for r in rows if r["tool"]]
    assert calls == [
        ("kv", "set", "allowed", "worker-all"),
        ("kv", "set", "denied", "no-secret-keys"),
        ("shout", None, "allowed", "worker-all"),
        ("shout", None, "denied", "no-runaway-a"),
    ]
