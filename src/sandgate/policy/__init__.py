"""The policy engine: ordered rules, first match wins, default deny; rate limits and budgets."""

from sandgate.policy.engine import DEFAULT_DENY, Decision, PolicyEngine
from sandgate.policy.limits import CallBudget, RateLimiter
from sandgate.policy.subject import Subject

__all__ = ["DEFAULT_DENY", "CallBudget", "Decision", "PolicyEngine", "RateLimiter", "Subject"]
