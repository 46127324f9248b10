"""Stop conditions, each a named check over the run's progress; the first that fires ends
the run with its name as the stop reason. ``budget_exceeded`` fires once the gateway refused a
tool call for the run's budget (``budgets.max_tool_calls``, or the wall clock), which it
checks at every call (``tools.budgets``)."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

from sandgate.agents.steps import Usage
from sandgate.config import AgentBudgets

__all__ = ["Progress", "StopCheck", "default_checks", "first_stop"]

#: The same action this many times in a row stops the run.
REPEAT_LIMIT = 3


@dataclass
class Progress:
    budgets: AgentBudgets
    started: float = field(default_factory=time.monotonic)
    steps: int = 0
    usage: Usage = field(default_factory=Usage)
    actions: list[str] = field(default_factory=list)
    #: Set when the gateway refused a tool call for this run's budget (``tools.budgets``).
    refused: str | None = None

    def elapsed_s(self) -> float:
        return time.monotonic() - self.started

    def remaining_s(self) -> float:
        return max(0.0, self.budgets.max_wall_clock_s - self.elapsed_s())


@dataclass(frozen=True)
class StopCheck:
    name: str
    fires: Callable[[Progress], bool]
    message: Callable[[Progress], str]


def default_checks() -> list[StopCheck]:
    return [
        StopCheck(
            "max_steps",
            lambda p: p.steps >= p.budgets.max_steps,
            lambda p: f"the agent used its {p.budgets.max_steps} steps (budgets.max_steps)",
        ),
        StopCheck(
            "max_tokens",
            lambda p: p.usage.tokens >= p.budgets.max_tokens,
            lambda p: (
                f"the run used {p.usage.tokens} tokens; the budget is "
                f"{p.budgets.max_tokens} (budgets.max_tokens)"
            ),
        ),
        StopCheck(
            "wall_clock",
            lambda p: p.elapsed_s() >= p.budgets.max_wall_clock_s,
            lambda p: (
                f"the run took longer than {p.budgets.max_wall_clock_s:g}s "
                "(budgets.max_wall_clock_s)"
            ),
        ),
        StopCheck(
            # Tool-call budgets are enforced by the gateway when a call is made; the run stops
            # at the first call it refused.
            "budget_exceeded",
            lambda p: p.refused is not None,
            lambda p: f"budget_exceeded: {p.refused}",
        ),
        StopCheck(
            "repeated_action",
            lambda p: len(p.actions) >= REPEAT_LIMIT and len(set(p.actions[-REPEAT_LIMIT:])) == 1,
            lambda p: f"the model repeated the same action {REPEAT_LIMIT} times in a row",
        ),
    ]


def first_stop(checks: list[StopCheck], progress: Progress) -> StopCheck | None:
    return next((check for check in checks if check.fires(progress)), None)
