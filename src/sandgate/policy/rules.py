"""A policy rule compiled for matching: its globs and patterns built once, at load.

``CompiledRule.matches`` is the whole meaning of "a rule matches a call": the subject, the
tool, the action, every argument condition and the time window must all hold. Lists are
any-of; a field left out matches anything (``action`` left out matches calls with or without
an action; given, it needs one).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal
from zoneinfo import ZoneInfo

from sandgate.config import PolicyRule, TimeWindow
from sandgate.policy.conditions import ArgCheck
from sandgate.policy.patterns import Pattern, compile_pattern
from sandgate.policy.subject import Subject

__all__ = ["SUBJECT_FIELDS", "CompiledRule", "Effect"]

Effect = Literal["allow", "deny", "ask"]

#: Subject fields a rule can name, in the order they are checked.
SUBJECT_FIELDS = ("team", "api_key", "agent", "sandbox")
_DAYS = ("mon", "tue", "wed", "thu", "fri", "sat", "sun")


def _globs(sources: list[str]) -> tuple[Pattern, ...]:
    return tuple(compile_pattern("glob", source) for source in sources)


@dataclass(frozen=True)
class CompiledRule:
    rule: PolicyRule
    subject: tuple[tuple[str, tuple[Pattern, ...]], ...]
    metadata: tuple[tuple[str, Pattern], ...]
    tools: tuple[Pattern, ...]
    actions: tuple[Pattern, ...] | None
    args: tuple[ArgCheck, ...]

    @classmethod
    def compile(cls, rule: PolicyRule) -> CompiledRule:
        """Raises ``PatternError`` for a pattern RE2 rejects (config validation says so first)."""
        subject = tuple(
            (name, _globs(sources))
            for name in SUBJECT_FIELDS
            if (sources := getattr(rule.subject, name)) is not None
        )
        return cls(
            rule=rule,
            subject=subject,
            metadata=tuple(
                (key, compile_pattern("glob", glob)) for key, glob in rule.subject.metadata.items()
            ),
            tools=_globs(rule.tool),
            actions=None if rule.action is None else _globs(rule.action),
            args=tuple(ArgCheck.compile(name, c) for name, c in rule.args.items()),
        )

    @property
    def id(self) -> str:
        return self.rule.id

    @property
    def effect(self) -> Effect:
        return self.rule.effect

    @property
    def unconditional(self) -> bool:
        """Matches every call of the tools and subjects it names (no action, args or time)."""
        return self.actions is None and not self.args and self.rule.time is None

    def applies_to(self, subject: Subject, tool: str) -> bool:
        """The subject and tool parts of the rule hold."""
        values = {
            "team": subject.team_id,
            "api_key": subject.api_key_id,
            "agent": subject.agent,
            "sandbox": subject.sandbox_id,
        }
        for name, patterns in self.subject:
            value = values[name]
            if value is None or not _any(patterns, value, f"the subject's {name}"):
                return False
        for key, pattern in self.metadata:
            value = subject.metadata.get(key)
            if value is None or not pattern.test(str(value), f"sandbox metadata '{key}'"):
                return False
        return _any(self.tools, tool, "the tool name")

    def matches(
        self,
        subject: Subject,
        tool: str,
        action: str | None,
        arguments: Mapping[str, Any],
        now: datetime,
    ) -> bool:
        """Every part of the rule holds for this call; raises ``Undecidable`` (see
        ``policy.patterns``) when a part cannot be judged on this input."""
        if not self.applies_to(subject, tool):
            return False
        if self.actions is not None and (
            action is None or not _any(self.actions, action, "the action")
        ):
            return False
        for check in self.args:
            if check.name not in arguments or not check.holds(arguments[check.name]):
                return False
        return self.rule.time is None or in_window(self.rule.time, now)


def in_window(window: TimeWindow, now: datetime) -> bool:
    """``now`` falls on one of the window's days, from ``start`` (inclusive) to ``end``."""
    local = now.astimezone(ZoneInfo(window.tz))
    if _DAYS[local.weekday()] not in window.days:
        return False
    minute = local.hour * 60 + local.minute
    return window.start_minute <= minute < window.end_minute


def _any(patterns: tuple[Pattern, ...], value: str, what: str) -> bool:
    return any(pattern.test(value, what) for pattern in patterns)
