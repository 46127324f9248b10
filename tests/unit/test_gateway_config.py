"""The gateway's configuration sections: valid documents load, mistakes name their path."""

from pathlib import Path

import pytest

from sandgate.config import ExecTool, McpTool, load_config
from sandgate.errors import ConfigError

VALID = """
agents:
  - id: data-analyst
    metadata: {dept: analytics}
secrets:
  API_TOKEN: {env: MY_TOKEN}
tools:
  - {name: kv, kind: builtin}
  - name: grep_logs
    kind: exec
    command: ["/usr/bin/grep", "--", "{pattern}", "/var/log/app.log"]
    parameters: {type: object, properties: {pattern: {type: string}}, required: [pattern]}
    secrets: [API_TOKEN]
    risk: medium
  - {name: files, kind: mcp, transport: stdio, command: ["python3", "-m", "server"]}
policy:
  budget_per_sandbox: 100
  rules:
    - id: r1
      effect: allow
      subject: {agent: data-analyst}
      tool: kv
      action: get
      args: {key: {glob: "user:*"}}
      time: {days: [mon, fri], start: "09:00", end: "17:00"}
      rate_limit: {calls: 10, window_s: 60}
approvals: {timeout_s: 60, webhook_url: "http://127.0.0.1:9/hook"}
audit: {fsync: false}
"""


def load(tmp_path: Path, text: str):  # type: ignore[no-untyped-def]
    path = tmp_path / "sandgate.yaml"
    path.write_text(text)
    return load_config(path, environ={})


def test_valid_gateway_config(tmp_path: Path) -> None:
    config = load(tmp_path, VALID)
    assert isinstance(config.tools[1], ExecTool) and isinstance(config.tools[2], McpTool)
    assert config.policy.rules[0].tool == ["kv"] and config.policy.rules[0].action == ["get"]
    assert config.agents[0].metadata == {"dept": "analytics"}
    assert config.audit.fsync is False and config.policy.budget_per_sandbox == 100


@pytest.mark.parametrize(
    ("text", "where"),
    [
        ("policy:\n  rules:\n    - {id: a, efect: allow}\n", r"policy\.rules\.0"),
        ("policy:\n  rules:\n    - {id: a, effect: maybe}\n", r"policy\.rules\.0\.effect"),
        ("tools:\n  - {name: Bad-Name, kind: builtin}\n", r"tools\.0\.builtin\.name"),
        ("tools:\n  - {name: x, kind: exec}\n", r"tools\.0\.exec\.command"),
        ("tools:\n  - {name: x, kind: mcp, transport: http}\n", r"tools\.0\.mcp"),
        ("secrets:\n  A: {env: X, file: /y}\n", r"secrets\.A"),
        (
            "policy:\n  rules:\n    - {id: a, effect: allow, args: {k: {matches: '('}}}\n",
            r"policy\.rules\.0: .*rule 'a': args\.k\.matches: pattern '\(' is not valid RE2",
        ),
        (
            "policy:\n  rules:\n    - {id: a, effect: allow, time: {start: '25:00'}}\n",
            r"policy\.rules\.0\.time\.start",
        ),
    ],
)
def test_mistakes_name_their_path(tmp_path: Path, text: str, where: str) -> None:
    with pytest.raises(ConfigError, match=where):
        load(tmp_path, text)


def test_undeclared_secret_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="needs secret 'NOPE'"):
        load(tmp_path, "tools:\n  - {name: kv, kind: builtin, secrets: [NOPE]}\n")


def test_duplicate_rule_ids_are_refused(tmp_path: Path) -> None:
    text = "policy:\n  rules:\n    - {id: a, effect: allow}\n    - {id: a, effect: deny}\n"
    with pytest.raises(ConfigError, match="used twice"):
        load(tmp_path, text)


def rule(text: str) -> str:
    return f"policy:\n  rules:\n    - {text}\n"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        # RE2 refuses what needs backtracking; the error names the rule, the place and pattern.
        (
            r"{id: no-backref, effect: deny, args: {cmd: {matches: '(a)\1'}}}",
            r"rule 'no-backref': args\.cmd\.matches: pattern '\(a\)\\1' is not valid RE2 "
            r"syntax: invalid escape sequence: \\1 \(RE2 has no backreferences or lookaround",
        ),
        (
            "{id: look, effect: allow, args: {p: {full_match: '(?<=a)b'}}}",
            r"rule 'look': args\.p\.full_match: pattern '\(\?<=a\)b' is not valid RE2",
        ),
        (
            "{id: huge, effect: allow, args: {p: {matches: '((a{1000}){1000}){1000}'}}}",
            r"rule 'huge': args\.p\.matches: pattern .* is not valid RE2",
        ),
        (
            "{id: long, effect: allow, tool: '" + "a" * 1025 + "'}",
            r"rule 'long': tool: pattern is 1025 characters; at most 1024",
        ),
        # ``regex`` meant a full match: refused with what to write, never silently a search.
        (
            "{id: old, effect: allow, args: {k: {regex: 'user:\\d+'}}}",
            r"args\.k: .*'regex' is no longer an operator: it meant a full match.*full_match:",
        ),
        ("{id: e, effect: deny, tool: []}", r"policy\.rules\.0\.tool: .*empty list matches"),
        ("{id: e, effect: deny, action: []}", r"policy\.rules\.0\.action: .*empty list"),
        ("{id: e, effect: deny, subject: {agent: []}}", r"subject\.agent: .*matches nobody"),
        ("{id: e, effect: deny, args: {k: {one_of: []}}}", r"args\.k\.one_of"),
        ("{id: e, effect: deny, time: {days: []}}", r"time\.days"),
        ("{id: e, effect: deny, time: {tz: Mars/Olympus}}", r"time\.tz: .*not an IANA"),
        (
            "{id: e, effect: deny, time: {start: '22:00', end: '06:00'}}",
            r"start 22:00 is not before end 06:00; a window across midnight is two rules",
        ),
    ],
)
def test_policy_config_errors_say_what_to_write(tmp_path: Path, text: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        load(tmp_path, rule(text))


def test_policy_operators_load(tmp_path: Path) -> None:
    config = load(
        tmp_path,
        rule(
            "{id: ok, effect: deny, args: {c: {matches: 'rm\\s+-rf', full_match: '.*'}, "
            "n: {min: 1, max: 2}, e: {equals: null}, g: {glob: '[!x]*'}}}"
        ),
    )
    args = config.policy.rules[0].args
    assert args["c"].patterns() == [("matches", r"rm\s+-rf"), ("full_match", ".*")]
    assert args["e"].has_equals and not args["n"].has_equals
