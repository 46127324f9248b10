"""The whole call pipeline with real services (python tools, file audit, SQLite index)."""

import asyncio
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from sandgate.config import load_config
from sandgate.errors import ConfigError
from sandgate.policy import Subject
from sandgate.store import Store
from sandgate.tools import Gateway, build_gateway
from tests.unit.tools import sample_tools

CONFIG = """
secrets:
  TOKEN: {env: PIPELINE_TEST_TOKEN}
tools:
  - name: echo
    kind: python
    entry: "tests.unit.tools.sample_tools:echo"
    secrets: [TOKEN]
    parameters:
      type: object
      properties:
        n: {type: integer}
  - name: boom
    kind: python
    entry: "tests.unit.tools.sample_tools:boom"
    secrets: [TOKEN]
  - name: danger
    kind: python
    entry: "tests.unit.tools.sample_tools:echo"
    risk: high
  - name: flaky
    kind: python
    entry: "tests.unit.tools.sample_tools:flaky"
    retry: {attempts: 3, backoff_s: 0}
  - name: flaky_write
    kind: python
    entry: "tests.unit.tools.sample_tools:flaky"
    idempotent: false
policy:
  rules:
    - id: limited
      effect: allow
      tool: echo
      subject: {agent: limited}
      rate_limit: {calls: 2, window_s: 3600}
    - id: allow-all
      effect: allow
      tool: [echo, boom, danger, flaky, flaky_write]
approvals:
  timeout_s: 0.2
"""
TOKEN = "tok-9f8e7d6c5b4a"
SUBJECT = Subject(sandbox_id="sb1", team_id="team", agent="analyst")


@pytest.fixture
def gateway(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Gateway:
    monkeypatch.setenv("PIPELINE_TEST_TOKEN", TOKEN)
    path = tmp_path / "config.yaml"
    path.write_text(CONFIG)
    config = load_config(path, environ={"SANDGATE_HOME": str(tmp_path)})
    return build_gateway(config, Store.open(f"sqlite:///{tmp_path / 'db.sqlite'}"))


def call(
    gateway: Gateway, name: Any, args: Any, subject: Subject = SUBJECT, key: str | None = None
) -> dict[str, Any]:
    return asyncio.run(gateway.call(subject, name, args, key)).wire()


def test_allowed_call_is_validated_redacted_and_audited(gateway: Gateway) -> None:
    reply = call(gateway, "echo", {"n": 7})
    assert reply["ok"] and reply["result"] == {"received": {"n": 7}, "secret": "[REDACTED:TOKEN]"}
    record = list(gateway.audit.records())[-1]
    assert (record["tool"], record["outcome"], record["rule"]) == ("echo", "allowed", "allow-all")
    assert TOKEN not in gateway.audit.path.read_text()


def test_GW_01_unknown_tool_is_denied_and_audited(gateway: Gateway) -> None:
    reply = call(gateway, "nope", {})
    assert reply["error"]["code"] == "policy_denied" and reply["error"]["status"] == 403
    record = list(gateway.audit.records())[-1]
    assert (record["outcome"], record["rule"]) == ("denied", "default-deny")


def test_invalid_arguments_name_the_field(gateway: Gateway) -> None:
    reply = call(gateway, "echo", {"n": "x"})
    assert reply["error"]["code"] == "invalid_arguments" and "'n'" in reply["error"]["message"]
    assert list(gateway.audit.records())[-1]["outcome"] == "invalid"


def test_strict_no_coercion_numeric_text_is_not_an_integer(gateway: Gateway) -> None:
    """ "7" is refused for an integer parameter, so the tool never runs on a guessed value."""
    reply = call(gateway, "echo", {"n": "7"})
    assert reply["error"]["code"] == "invalid_arguments" and "'n'" in reply["error"]["message"]
    assert list(gateway.audit.records())[-1]["outcome"] == "invalid"


def test_SEC_failure_message_is_redacted(gateway: Gateway) -> None:
    reply = call(gateway, "boom", {})
    assert reply["error"]["code"] == "tool_failed"
    message = reply["error"]["message"]
    assert TOKEN not in message and "[REDACTED:TOKEN]" in message
    assert TOKEN not in gateway.audit.path.read_text()


def test_GW_11_rate_limit_per_sandbox(gateway: Gateway) -> None:
    limited = Subject(sandbox_id="sb-l", team_id="team", agent="limited")
    codes = [call(gateway, "echo", {}, limited).get("error", {}).get("code") for _ in range(3)]
    assert codes == [None, None, "rate_limited"]
    other = Subject(sandbox_id="sb-other", team_id="team", agent="limited")
    assert call(gateway, "echo", {}, other)["ok"]


def test_GW_16_idempotency_key_returns_first_result(gateway: Gateway) -> None:
    before = len(sample_tools.CALLS)
    first = call(gateway, "echo", {"n": 1}, key="k1")
    second = call(gateway, "echo", {"n": 1}, key="k1")
    assert first == second and len(sample_tools.CALLS) == before + 1
    assert call(gateway, "echo", {"n": 2}, key="k1")["error"]["code"] == "invalid_arguments"


def test_point_6_a_replayed_failure_keeps_its_code_and_status(gateway: Gateway) -> None:
    """With secrets configured the redactor rewrites every error: a replay used to come back
    as internal/500 instead of the tool_failed/502 the first call got."""
    first = call(gateway, "boom", {}, key="same")
    second = call(gateway, "boom", {}, key="same")
    assert first == second
    assert (first["error"]["code"], first["error"]["status"]) == ("tool_failed", 502)
    replayed = list(gateway.audit.records())[-1]
    assert replayed["replayed"] is True and replayed["outcome"] == "failed"
    assert replayed["error"]["code"] == "tool_failed"


def test_point_6_retries_only_idempotent_tools(gateway: Gateway) -> None:
    sample_tools.ATTEMPTS.clear()
    assert call(gateway, "flaky", {"key": "a"}) == {"ok": True, "result": 3, "truncated": False}
    assert list(gateway.audit.records())[-1]["attempts"] == 3
    write = call(gateway, "flaky_write", {"key": "b"})
    assert write["error"]["code"] == "tool_failed" and sample_tools.ATTEMPTS["b"] == 1


def test_point_6_retry_on_a_write_is_a_config_error(tmp_path: Path) -> None:
    path = tmp_path / "config.yaml"
    path.write_text(
        "tools:\n  - {name: w, kind: python, entry: 'm:f', idempotent: false, retry: {}}\n"
    )
    with pytest.raises(ConfigError, match="retry needs an idempotent tool"):
        load_config(path, environ={"SANDGATE_HOME": str(tmp_path)})


def test_high_risk_allow_still_asks_and_times_out_denied(gateway: Gateway) -> None:
    reply = call(gateway, "danger", {})
    assert reply["error"]["code"] == "approval_denied" and "expired" in reply["error"]["message"]
    record = list(gateway.audit.records())[-1]
    assert record["outcome"] == "denied" and record["approval"].startswith("apr_")


def test_GW_10_unwritable_audit_fails_closed(gateway: Gateway) -> None:
    call(gateway, "echo", {})
    gateway.audit.path.unlink()
    gateway.audit.path.mkdir()  # a directory where the log should be: unwritable even for root
    before = len(sample_tools.CALLS)
    reply = call(gateway, "echo", {})
    assert reply["error"]["code"] == "audit_unavailable" and reply["error"]["status"] == 503
    assert len(sample_tools.CALLS) == before


DENY_AFTER_ALLOW = """
tools:
  - name: echo
    kind: python
    entry: "tests.unit.tools.sample_tools:echo"
    parameters: {type: object, properties: {path: {type: string}}}
  - name: hidden
    kind: python
    entry: "tests.unit.tools.sample_tools:echo"
policy:
  rules:
    - {id: allow-all, effect: allow, tool: "*"}
    - {id: no-etc, effect: deny, tool: echo, args: {path: {matches: "^/etc/"}}}
    - {id: no-hidden, effect: deny, tool: hidden}
"""


def test_policy_deny_after_allow_wins_in_the_pipeline_and_is_audited(tmp_path: Path) -> None:
    path = tmp_path / "config.yaml"
    path.write_text(DENY_AFTER_ALLOW)
    config = load_config(path, environ={"SANDGATE_HOME": str(tmp_path)})
    gateway = build_gateway(config, Store.open(f"sqlite:///{tmp_path / 'db.sqlite'}"))
    before = len(sample_tools.CALLS)
    denied = call(gateway, "echo", {"path": "/etc/shadow"})
    assert denied["error"]["code"] == "policy_denied"
    assert "policy rule 'no-etc' says deny" in denied["error"]["message"]
    assert call(gateway, "echo", {"path": "/tmp/x"})["ok"]
    # An unconditional deny hides the tool before validation; the audit still names it.
    hidden = call(gateway, "hidden", {"anything": 1})
    assert hidden["error"]["message"] == "hidden: no policy rule allows this call (default deny)"
    assert [(r["tool"], r["outcome"], r["rule"]) for r in gateway.audit.records()] == [
        ("echo", "denied", "no-etc"),
        ("echo", "allowed", "allow-all"),
        ("hidden", "denied", "no-hidden"),
    ]
    assert len(sample_tools.CALLS) == before + 1
    assert gateway.dry_run(SUBJECT, "hidden", {})["rule"] == "no-hidden"
    assert [t.name for t in gateway.visible_tools(SUBJECT)] == ["echo"]


SCOPED = """
agents:
  - {id: narrow, tools: [echo]}
tools:
  - name: echo
    kind: python
    entry: "tests.unit.tools.sample_tools:echo"
  - name: other
    kind: python
    entry: "tests.unit.tools.sample_tools:echo"
policy:
  rules:
    - {id: allow-all, effect: allow, tool: "*"}
"""


def test_point_3_an_agents_tools_are_a_hard_limit(tmp_path: Path) -> None:
    path = tmp_path / "config.yaml"
    path.write_text(SCOPED)
    config = load_config(path, environ={"SANDGATE_HOME": str(tmp_path)})
    gateway = build_gateway(config, Store.open(f"sqlite:///{tmp_path / 'db.sqlite'}"))
    narrow = Subject(sandbox_id="sb-n", team_id="team", agent="narrow")
    anyone = Subject(sandbox_id="sb-a", team_id="team")
    assert [t.name for t in gateway.visible_tools(narrow)] == ["echo"]
    assert [t.name for t in gateway.visible_tools(anyone)] == ["echo", "other"]
    before = len(sample_tools.CALLS)
    refused = call(gateway, "other", {}, narrow)
    assert refused["error"]["code"] == "policy_denied"
    assert (
        refused["error"]["message"]
        == "tool 'other': no policy rule allows this call (default deny)"
    )
    assert call(gateway, "echo", {}, narrow)["ok"] and call(gateway, "other", {}, anyone)["ok"]
    assert len(sample_tools.CALLS) == before + 2
    rules = [(r["tool"], r["rule"]) for r in gateway.audit.records()]
    assert rules == [("other", "agent-tools"), ("echo", "allow-all"), ("other", "allow-all")]
    assert gateway.dry_run(narrow, "other", {})["rule"] == "agent-tools"


def test_a_tool_whose_schema_is_broken_fails_clearly_and_is_audited(
    gateway: Gateway, monkeypatch: pytest.MonkeyPatch
) -> None:
    # What an MCP server could bring: its own schema, never checked by the configuration.
    tool = gateway.registry.get("echo")
    assert tool is not None
    broken = {"type": "object", "properties": {"n": {"type": "no-such-type"}}}
    monkeypatch.setitem(gateway.registry._tools, "echo", replace(tool, parameters=broken))
    before = len(sample_tools.CALLS)
    reply = call(gateway, "echo", {"n": 7})
    assert reply["error"]["code"] == "tool_failed" and reply["error"]["status"] == 502
    assert "parameter schema is not usable" in reply["error"]["message"]
    assert len(sample_tools.CALLS) == before  # the tool never ran
    record = list(gateway.audit.records())[-1]
    assert (record["tool"], record["outcome"]) == ("echo", "failed")
