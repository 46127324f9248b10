"""Deciding a tool call: deny-overrides, default deny.

Semantics: of the rules that match a call, any ``deny`` wins wherever it stands in the list;
otherwise any ``ask``; otherwise any ``allow``; no matching rule denies (rule id
``default-deny``). The decision names one rule, the *deciding* rule: the first rule in list
order among those of the winning effect. Its id is audited, and its options apply (its
``rate_limit``, ``allow_high_risk``, ``approval_timeout_s``). So order never changes *whether*
a call is allowed, asked or denied, only which rule of that effect speaks for it; adding an
``allow`` anywhere can never turn a deny into anything else.

Trust: the engine trusts its rules (reviewed config) and the ``Subject`` (built by the gateway
from the store). It trusts nothing about the tool name or arguments: names are compared in
canonical form (``tools.names``), argument conditions are evaluated on the *validated*
arguments, the same object the executor later receives (GW-07), and every pattern runs in time
linear in the text (``policy.patterns``). A condition that cannot be judged (a text over the
input bound, a NaN under a numeric bound) denies the call with rule id ``undecidable``. The
engine does not execute, wait for approvals or audit; the pipeline in ``tools.pipeline`` does,
with this engine's ``Decision``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sandgate.config import PolicyConfig, PolicyRule
from sandgate.errors import ConfigError
from sandgate.policy.patterns import PatternError, Undecidable
from sandgate.policy.rules import CompiledRule, Effect
from sandgate.policy.subject import Subject

__all__ = ["DEFAULT_DENY", "EFFECT_STRENGTH", "UNDECIDABLE", "Decision", "PolicyEngine"]

#: The rule id recorded when no rule matched.
DEFAULT_DENY = "default-deny"
#: The rule id recorded when a condition could not be judged on the call's input.
UNDECIDABLE = "undecidable"
#: Strongest first: the effect that wins when rules of several effects match.
EFFECT_STRENGTH: tuple[Effect, ...] = ("deny", "ask", "allow")


@dataclass(frozen=True)
class Decision:
    effect: Effect
    rule_id: str
    rule: PolicyRule | None = None
    detail: str = ""

    @property
    def reason(self) -> str:
        if self.detail:
            return self.detail
        if self.rule is None:
            return "no policy rule allows this call (default deny)"
        return f"policy rule '{self.rule_id}' says {self.effect}"


class PolicyEngine:
    """Evaluates a ``PolicyConfig``. Pure: the same inputs give the same decision."""

    def __init__(self, config: PolicyConfig) -> None:
        try:
            self._rules = [CompiledRule.compile(rule) for rule in config.rules]
        except PatternError as exc:  # config validation checks first; this is a safety net
            raise ConfigError(f"policy: {exc}") from None

    @property
    def rules(self) -> list[PolicyRule]:
        return [compiled.rule for compiled in self._rules]

    def decide(
        self,
        subject: Subject,
        tool: str,
        action: str | None,
        arguments: Mapping[str, Any],
        now: datetime,
    ) -> Decision:
        """The strongest effect among the matching rules, named by its first rule."""
        deciding: dict[Effect, CompiledRule] = {}
        try:
            for rule in self._rules:
                if rule.effect in deciding:
                    continue  # an earlier rule of this effect already speaks for it
                if rule.matches(subject, tool, action, arguments, now):
                    deciding[rule.effect] = rule
                    if rule.effect == "deny":
                        break  # nothing can outrank a deny
        except Undecidable as exc:
            return Decision(
                "deny",
                UNDECIDABLE,
                detail=f"the policy cannot judge this call: {exc.what} (denied)",
            )
        for effect in EFFECT_STRENGTH:
            if effect in deciding:
                winner = deciding[effect]
                return Decision(effect, winner.id, winner.rule)
        return Decision("deny", DEFAULT_DENY)

    def may_use(self, subject: Subject, tool: str) -> bool:
        """Whether some call of ``tool`` could be allowed for ``subject`` (stub visibility)."""
        return self.hidden_by(subject, tool) is None

    def hidden_by(self, subject: Subject, tool: str) -> Decision | None:
        """None when some call of ``tool`` could be allowed or asked for ``subject``; else the
        deny that applies to every call of it.

        A tool is usable when an ``allow`` or ``ask`` rule applies to the subject and tool,
        unless a ``deny`` with no action, argument or time condition does: that one matches
        every call of the tool wherever it stands, so the decision names it. With no such
        deny and no allow or ask, the decision is ``default-deny``.
        """
        try:
            applicable = [rule for rule in self._rules if rule.applies_to(subject, tool)]
        except Undecidable as exc:
            return Decision("deny", UNDECIDABLE, detail=f"the policy cannot judge: {exc.what}")
        for rule in applicable:
            if rule.effect == "deny" and rule.unconditional:
                return Decision("deny", rule.id, rule.rule)
        if any(rule.effect != "deny" for rule in applicable):
            return None
        return Decision("deny", DEFAULT_DENY)
