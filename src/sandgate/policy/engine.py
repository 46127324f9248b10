"""Deciding a tool call: ordered rules, first match wins, default deny.

Trust: the engine trusts its rules (reviewed config) and the ``Subject`` (built by the gateway
from the store). It trusts nothing about the tool name or arguments: names are compared in
canonical form (``tools.names``), and argument conditions are evaluated on the *validated*
arguments, the same object the executor later receives (GW-07). It does not execute, wait for
approvals or audit; the pipeline in ``tools.pipeline`` does, with this engine's ``Decision``.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from fnmatch import fnmatchcase
from typing import Any, Literal
from zoneinfo import ZoneInfo

from sandgate.config import ArgCondition, PolicyConfig, PolicyRule, SubjectMatch, TimeWindow
from sandgate.policy.subject import Subject

__all__ = ["DEFAULT_DENY", "Decision", "PolicyEngine"]

#: The rule id recorded when no rule matched.
DEFAULT_DENY = "default-deny"

Effect = Literal["allow", "deny", "ask"]


@dataclass(frozen=True)
class Decision:
    effect: Effect
    rule_id: str
    rule: PolicyRule | None = None

    @property
    def reason(self) -> str:
        if self.rule is None:
            return "no policy rule allows this call (default deny)"
        return f"policy rule '{self.rule_id}' says {self.effect}"


class PolicyEngine:
    """Evaluates a ``PolicyConfig``. Pure: the same inputs give the same decision."""

    def __init__(self, config: PolicyConfig) -> None:
        self._rules = list(config.rules)

    @property
    def rules(self) -> list[PolicyRule]:
        return list(self._rules)

    def decide(
        self,
        subject: Subject,
        tool: str,
        action: str | None,
        arguments: Mapping[str, Any],
        now: datetime,
    ) -> Decision:
        """The first matching rule's effect, or deny with rule ``default-deny``."""
        for rule in self._rules:
            if (
                _subject_matches(rule.subject, subject)
                and _any_glob(rule.tool, tool)
                and (rule.action is None or (action is not None and _any_glob(rule.action, action)))
                and all(_arg_matches(c, name, arguments) for name, c in rule.args.items())
                and (rule.time is None or _in_window(rule.time, now))
            ):
                return Decision(rule.effect, rule.id, rule)
        return Decision("deny", DEFAULT_DENY)

    def may_use(self, subject: Subject, tool: str) -> bool:
        """Whether some call of ``tool`` could be allowed for ``subject`` (stub visibility).

        A rule that only matches some actions, arguments or hours may allow some calls, so it
        makes the tool visible; an unconditional deny hides it from every later rule.
        """
        for rule in self._rules:
            if not (_subject_matches(rule.subject, subject) and _any_glob(rule.tool, tool)):
                continue
            if rule.effect != "deny":
                return True
            if rule.action is None and not rule.args and rule.time is None:
                return False
        return False


def _any_glob(patterns: list[str], value: str) -> bool:
    return any(fnmatchcase(value, pattern) for pattern in patterns)


def _subject_matches(match: SubjectMatch, subject: Subject) -> bool:
    checks: list[tuple[list[str] | None, str | None]] = [
        (match.team, subject.team_id),
        (match.api_key, subject.api_key_id),
        (match.agent, subject.agent),
        (match.sandbox, subject.sandbox_id),
    ]
    for patterns, value in checks:
        if patterns is not None and (value is None or not _any_glob(patterns, value)):
            return False
    for key, pattern in match.metadata.items():
        value = subject.metadata.get(key)
        if value is None or not fnmatchcase(str(value), pattern):
            return False
    return True


def _arg_matches(condition: ArgCondition, name: str, arguments: Mapping[str, Any]) -> bool:
    if name not in arguments:
        return False
    value = arguments[name]
    if condition.equals is not None and value != condition.equals:
        return False
    if condition.one_of is not None and value not in condition.one_of:
        return False
    if condition.glob is not None and not (
        isinstance(value, str) and fnmatchcase(value, condition.glob)
    ):
        return False
    if condition.regex is not None and not (
        isinstance(value, str) and re.fullmatch(condition.regex, value) is not None
    ):
        return False
    if condition.min is not None or condition.max is not None:
        if isinstance(value, bool) or not isinstance(value, int | float):
            return False
        if condition.min is not None and value < condition.min:
            return False
        if condition.max is not None and value > condition.max:
            return False
    return True


def _in_window(window: TimeWindow, now: datetime) -> bool:
    local = now.astimezone(ZoneInfo(window.tz))
    day = ("mon", "tue", "wed", "thu", "fri", "sat", "sun")[local.weekday()]
    if day not in window.days:
        return False
    minute = local.hour * 60 + local.minute
    return _minutes(window.start) <= minute < _minutes(window.end)


def _minutes(hhmm: str) -> int:
    hours, minutes = hhmm.split(":")
    return int(hours) * 60 + int(minutes)
