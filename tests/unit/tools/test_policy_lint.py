"""``sandgate policy lint``: rules that can never match or never take effect, proven.

Fixture configs live in ``lint_fixtures/``; the soundness property checks that every finding
holds for random calls (lint never reports a rule that could still decide)."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sandgate.config import Config, PolicyConfig, load_config
from sandgate.policy import DEFAULT_DENY, PolicyEngine, Subject, ToolShape, lint
from sandgate.tools.registry import tool_shapes
from tests.fixtures.server import exec_sandgate
from tests.unit.tools.test_policy import (
    ARG_CONDITIONS,
    MONDAY_NOON,
    RULE_CONDITIONS,
    SATURDAY,
    unique_ids,
)

FIXTURES = Path(__file__).with_name("lint_fixtures")
ROOT = Path(__file__).parents[3]

EXPECTED = {
    "typo-tool": ("never-matches", None, "tool ['kvv'] matches no declared tool"),
    "ghost-agent": ("never-matches", None, "matches no declared agent (declared: analyst, writer)"),
    "no-such-action": ("never-matches", None, "action ['put'] is none of its tools' actions"),
    "action-on-actionless": ("never-matches", None, "none of its tools (grep_logs) has an action"),
    "arg-kv-refuses": ("never-matches", None, "their schemas refuse other arguments"),
    "pattern-on-integer": ("never-matches", None, "a pattern needs a string, but it is integer"),
    "min-above-max": ("never-matches", None, "min 10 is above max 1"),
    "equals-fails-glob": ("never-matches", None, "no value given by equals/one_of passes"),
    "unknown-arg": ("unknown-argument", None, "has a parameter 'patern'"),
    "writer-db-secrets": ("shadowed", "deny-secrets", "a deny wins wherever it stands"),
    "writer-deletes": ("shadowed", "ask-deletes", "ask outranks allow"),
    "analyst-reads-again": ("shadowed", "analyst-reads", "same conditions as 'analyst-reads'"),
    "grep-limited": ("shadowed", "all-grep", "'all-grep' comes first, has the same effect"),
}


def lint_config(config: Config) -> list[Any]:
    return lint(config.policy, tool_shapes(config.tools), [a.id for a in config.agents])


def test_policy_lint_reports_each_problem_with_its_reason() -> None:
    findings = lint_config(load_config(FIXTURES / "problems.yaml", environ={}))
    got = {f.rule: (f.kind, f.by) for f in findings}
    assert got == {rule: (kind, by) for rule, (kind, by, _) in EXPECTED.items()}
    for finding in findings:
        assert EXPECTED[finding.rule][2] in finding.reason, finding


def test_policy_lint_is_quiet_on_clean_configs() -> None:
    """The shipped example and a config with only provably-independent rules."""
    for path in (ROOT / "examples" / "code-mode" / "sandgate.yaml", FIXTURES / "clean.yaml"):
        assert lint_config(load_config(path, environ={})) == [], path


def test_policy_lint_order_independent_deny_shadow() -> None:
    """A deny shadows a narrower allow before or after it; a narrower deny shadows nothing."""
    tools = [ToolShape("kv", {"type": "object", "properties": {"key": {"type": "string"}}})]
    broad_deny = {"id": "deny", "effect": "deny", "tool": "kv"}
    narrow_allow = {"id": "allow", "effect": "allow", "tool": "kv", "args": {"key": {}}}
    for rules in ([broad_deny, narrow_allow], [narrow_allow, broad_deny]):
        findings = lint(PolicyConfig.model_validate({"rules": rules}), tools, [])
        assert [(f.rule, f.kind, f.by) for f in findings] == [("allow", "shadowed", "deny")]
    narrow_deny = {**narrow_allow, "id": "deny2", "effect": "deny"}
    open_allow = {**broad_deny, "id": "allow2", "effect": "allow"}
    findings = lint(PolicyConfig.model_validate({"rules": [narrow_deny, open_allow]}), tools, [])
    assert findings == []


def sandgate(*args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("E2B_", "SANDGATE_"))}
    return exec_sandgate(args, env)


def test_policy_lint_cli_exit_codes_and_json() -> None:
    problems = sandgate("policy", "lint", "--json", "-c", str(FIXTURES / "problems.yaml"))
    assert problems.returncode == 1, problems.stderr
    report = json.loads(problems.stdout)
    assert report["ok"] is False and report["rules"] == 22
    assert {f["rule"] for f in report["findings"]} == set(EXPECTED)
    assert set(report["findings"][0]) == {"rule", "effect", "kind", "reason", "by"}
    text = sandgate("policy", "lint", "-c", str(FIXTURES / "problems.yaml"))
    assert text.returncode == 1
    assert (
        "allow rule 'writer-db-secrets': shadowed: deny rule 'deny-secrets' matches every call"
        in text.stdout
    )
    assert text.stdout.rstrip().endswith("22 rules, 13 findings")
    clean = sandgate("policy", "lint", "--json", "-c", str(FIXTURES / "clean.yaml"))
    assert clean.returncode == 0, clean.stdout + clean.stderr
    assert json.loads(clean.stdout)["ok"] is True


# -- soundness: every finding holds for every call -------------------------------------------

SHAPES = [
    ToolShape(
        "crm",
        {
            "type": "object",
            "properties": {"op": {"enum": ["get", "set", "list"]}, "x": {}},
            "additionalProperties": False,
        },
        action="op",
    ),
    ToolShape("mail", {"type": "object", "properties": {"x": {"type": "string"}}}),
    ToolShape("mcp", {}, prefix=True),
]
AGENTS = ["a1", "a2", "b"]
LINT_CONDITIONS: dict[str, Any] = {
    **RULE_CONDITIONS,
    "tool": st.sampled_from(
        [None, "*", "crm", "c*", ["crm", "mail"], "m?il", "mcp_*", "mcp_read", "crn", "kv"]
    ),
    "subject": st.sampled_from([None, {"agent": "a1"}, {"agent": "a*"}, {"agent": "z"}]),
    "action": st.sampled_from([None, "get", ["get", "set"], "s*", "put"]),
    "args": st.sampled_from(
        [
            *ARG_CONDITIONS,
            {"x": {"min": 1, "matches": "a"}},
            {"x": {"equals": "u1", "glob": "a*"}},
            {"y": {"equals": 1}},
            {"x": {"min": 0}},
            {"x": {"min": 1, "max": 3}},
            {"x": {"full_match": "b+"}},
            {"x": {"glob": "u1"}},
        ]
    ),
}


@st.composite
def lint_rules(draw: st.DrawFn) -> dict[str, Any]:
    rule: dict[str, Any] = {
        "id": "r",
        "effect": draw(st.sampled_from(["allow", "deny", "ask"])),
    }
    for key, strategy in LINT_CONDITIONS.items():
        value = draw(strategy)
        if value is not None:
            rule[key] = value
    return rule


@st.composite
def valid_calls(draw: st.DrawFn) -> dict[str, Any]:
    """Calls that could reach the engine: declared tools, enum actions, schema-valid args."""
    tool = draw(st.sampled_from(["crm", "mail", "mcp_read", "mcp_write"]))
    action = draw(st.sampled_from([None, "get", "set", "list"])) if tool == "crm" else None
    values: list[Any] = [1, True, "u1", "ab", "aab", 7, 2.5, "zzz", None, "bbb"]
    if tool == "mail":
        values = [v for v in values if isinstance(v, str)]
    arguments = draw(st.sampled_from([{}, *({"x": v} for v in values)]))
    if tool.startswith("mcp_") and draw(st.booleans()):
        arguments = {**arguments, "y": draw(st.sampled_from([1, "1"]))}
    return {
        "subject": Subject(
            sandbox_id="sb",
            team_id="team_a",
            agent=draw(st.sampled_from([None, *AGENTS])),
            metadata=draw(st.sampled_from([{}, {"env": "production"}])),
        ),
        "tool": tool,
        "action": action,
        "arguments": arguments,
        "now": draw(st.sampled_from([MONDAY_NOON, SATURDAY])),
    }


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(rules=st.lists(lint_rules(), max_size=7), calls=st.lists(valid_calls(), max_size=12))
def test_policy_lint_findings_are_proofs(
    rules: list[dict[str, Any]], calls: list[dict[str, Any]]
) -> None:
    rules = unique_ids(rules)
    policy = PolicyConfig.model_validate({"rules": rules})
    findings = lint(policy, SHAPES, AGENTS)
    engine = PolicyEngine(policy)
    for call in calls:
        args = (call["subject"], call["tool"], call["action"], call["arguments"], call["now"])
        decision = engine.decide(*args)
        for finding in findings:
            if finding.kind == "never-matches":
                rule = next(r for r in rules if r["id"] == finding.rule)
                alone = PolicyEngine(PolicyConfig.model_validate({"rules": [rule]}))
                assert alone.decide(*args).rule_id == DEFAULT_DENY, (finding, call)
            elif finding.kind == "shadowed":
                assert decision.rule_id != finding.rule, (finding, call)
