"""The policy engine: deny-overrides rules over linear-time conditions, default deny; rate
limits and budgets; ``lint`` for rules that can never match or never take effect."""

from sandgate.policy.engine import DEFAULT_DENY, UNDECIDABLE, Decision, PolicyEngine
from sandgate.policy.limits import CallBudget, RateLimiter
from sandgate.policy.lint import Finding, ToolShape, lint
from sandgate.policy.subject import Subject

__all__ = [
    "DEFAULT_DENY",
    "UNDECIDABLE",
    "CallBudget",
    "Decision",
    "Finding",
    "PolicyEngine",
    "RateLimiter",
    "Subject",
    "ToolShape",
    "lint",
]
