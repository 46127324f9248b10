"""The policy engine: ordered rules, first match wins, default deny; limits and budgets."""

from datetime import UTC, datetime
from typing import Any

import pytest

from sandgate.config import PolicyConfig
from sandgate.policy import DEFAULT_DENY, CallBudget, PolicyEngine, RateLimiter, Subject

MONDAY_NOON = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)
SATURDAY = datetime(2026, 11, 28, 12, 0, tzinfo=UTC)


def engine(*rules: dict[str, Any]) -> PolicyEngine:
    return PolicyEngine(PolicyConfig.model_validate({"rules": list(rules)}))


def subject(**kw: Any) -> Subject:
    base: dict[str, Any] = {"sandbox_id": "sb1", "team_id": "team_a", "agent": "analyst"}
    return Subject(**{**base, **kw})


def test_no_rules_is_default_deny() -> None:
    decision = engine().decide(subject(), "kv", "get", {}, MONDAY_NOON)
    assert (decision.effect, decision.rule_id) == ("deny", DEFAULT_DENY)


def test_first_match_wins() -> None:
    e = engine(
        {"id": "deny-set", "effect": "deny", "tool": "kv", "action": "set"},
        {"id": "allow-kv", "effect": "allow", "tool": "kv"},
    )
    assert e.decide(subject(), "kv", "set", {}, MONDAY_NOON).rule_id == "deny-set"
    assert e.decide(subject(), "kv", "get", {}, MONDAY_NOON).effect == "allow"


@pytest.mark.parametrize(
    ("match", "expected"),
    [
        ({"agent": "analyst"}, "allow"),
        ({"agent": "other"}, "deny"),
        ({"team": ["team_b", "team_a"]}, "allow"),
        ({"api_key": "key_1"}, "deny"),
        ({"metadata": {"env": "prod*"}}, "allow"),
        ({"metadata": {"env": "dev"}}, "deny"),
    ],
)
def test_subject_conditions(match: dict[str, Any], expected: str) -> None:
    e = engine({"id": "r", "effect": "allow", "subject": match})
    s = subject(metadata={"env": "production"})
    assert e.decide(s, "kv", None, {}, MONDAY_NOON).effect == expected


@pytest.mark.parametrize(
    ("condition", "value", "expected"),
    [
        ({"equals": 3}, 3, "allow"),
        ({"equals": 3}, 4, "deny"),
        ({"glob": "user:*"}, "user:7", "allow"),
        ({"glob": "user:*"}, "admin:1", "deny"),
        ({"regex": r"user:\d+"}, "user:12", "allow"),
        ({"regex": r"user:\d+"}, "user:12x", "deny"),
        ({"min": 1, "max": 10}, 10, "allow"),
        ({"min": 1, "max": 10}, 11, "deny"),
        ({"min": 1}, "5", "deny"),
        ({"one_of": ["a", "b"]}, "b", "allow"),
    ],
)
def test_argument_conditions(condition: dict[str, Any], value: Any, expected: str) -> None:
    e = engine({"id": "r", "effect": "allow", "args": {"x": condition}})
    assert e.decide(subject(), "t", None, {"x": value}, MONDAY_NOON).effect == expected


def test_missing_argument_does_not_match() -> None:
    e = engine({"id": "r", "effect": "allow", "args": {"x": {"glob": "*"}}})
    assert e.decide(subject(), "t", None, {}, MONDAY_NOON).effect == "deny"


def test_time_window() -> None:
    e = engine(
        {
            "id": "office",
            "effect": "allow",
            "time": {
                "days": ["mon", "tue", "wed", "thu", "fri"],
                "start": "09:00",
                "end": "17:00",
                "tz": "UTC",
            },
        }
    )
    assert e.decide(subject(), "t", None, {}, MONDAY_NOON).effect == "allow"
    assert e.decide(subject(), "t", None, {}, SATURDAY).effect == "deny"
    assert e.decide(subject(), "t", None, {}, MONDAY_NOON.replace(hour=18)).effect == "deny"


def test_action_rule_needs_an_action() -> None:
    e = engine({"id": "r", "effect": "allow", "action": "get"})
    assert e.decide(subject(), "t", None, {}, MONDAY_NOON).effect == "deny"


def test_may_use_hides_unconditionally_denied_tools() -> None:
    e = engine(
        {"id": "no-secret", "effect": "deny", "tool": "secret_*"},
        {"id": "some-kv", "effect": "allow", "tool": "kv", "action": "get"},
        {"id": "all", "effect": "allow", "tool": "*", "subject": {"agent": "root"}},
    )
    assert e.may_use(subject(), "kv")
    assert not e.may_use(subject(), "secret_read")
    assert not e.may_use(subject(), "other")
    assert e.may_use(subject(agent="root"), "other")


def test_rate_limiter_sliding_window() -> None:
    limiter = RateLimiter()
    key = ("sandbox", "sb1", "r", "kv")
    assert [limiter.acquire(key, 2, 10.0, t) for t in (0.0, 1.0, 2.0)] == [True, True, False]
    assert limiter.acquire(key, 2, 10.0, 10.5)  # the first call left the window
    assert limiter.acquire(("sandbox", "sb2", "r", "kv"), 2, 10.0, 2.0)  # other key unaffected
    limiter.forget(("sandbox", "sb1"))
    assert limiter.acquire(key, 1, 10.0, 11.0)


def test_budget_per_sandbox() -> None:
    budget = CallBudget(2)
    assert [budget.spend("a") for _ in range(3)] == [True, True, False]
    assert budget.spend("b")
    assert CallBudget(None).spend("a")
