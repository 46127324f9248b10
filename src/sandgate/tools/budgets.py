"""Budgets of agent runs, enforced when a tool call is made.

While an agent run is active its sandbox carries the run's budget: ``max_tool_calls`` calls
and the run's wall clock. Every call from that sandbox spends one unit *before* anything else
happens to it (validation, policy, execution), so the call after the last one allowed is
refused with ``budget_exceeded`` at once, whatever the script does next; a call after the
run's deadline is refused the same way. The refusal also sets the budget's ``exceeded`` event,
which the runner waits on to interrupt the code and stop the run with that reason.

Calls count whatever their outcome (a denied or invalid call is still a call), as the run's
``usage.tool_calls`` does. Budgets live in the gateway's memory, like rate limits: a sandbox
has a run budget only while the run is active in this process.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field

from sandgate.errors import BudgetExceeded

__all__ = ["RunBudget", "RunBudgets"]


@dataclass
class RunBudget:
    run_id: str
    max_tool_calls: int
    #: ``time.monotonic()`` after which no call is allowed.
    deadline: float
    wall_clock_s: float
    spent: int = 0
    #: The first refusal (the run stops with it); None while within budget.
    refused: BudgetExceeded | None = None
    exceeded: asyncio.Event = field(default_factory=asyncio.Event)

    def spend(self, label: str) -> None:
        """Counts one call; raises ``BudgetExceeded`` (and sets ``exceeded``) when the run
        has no call left or its wall clock is spent."""
        self.spent += 1
        if self.spent > self.max_tool_calls:
            self._refuse(
                f"{label}: tool call {self.spent} refused: run {self.run_id} may make "
                f"{self.max_tool_calls} tool calls (budgets.max_tool_calls); the run stops"
            )
        if time.monotonic() > self.deadline:
            self._refuse(
                f"{label}: refused: run {self.run_id} used its wall clock of "
                f"{self.wall_clock_s:g}s (budgets.max_wall_clock_s); the run stops"
            )

    def _refuse(self, message: str) -> None:
        error = BudgetExceeded(message)
        if self.refused is None:
            self.refused = error
            self.exceeded.set()
        raise error


class RunBudgets:
    """The open run budget of each sandbox (at most one: one active run per session)."""

    def __init__(self) -> None:
        self._open: dict[str, RunBudget] = {}

    def open(
        self, sandbox_id: str, run_id: str, *, max_tool_calls: int, wall_clock_s: float
    ) -> RunBudget:
        budget = RunBudget(run_id, max_tool_calls, time.monotonic() + wall_clock_s, wall_clock_s)
        self._open[sandbox_id] = budget
        return budget

    def close(self, sandbox_id: str, budget: RunBudget) -> None:
        if self._open.get(sandbox_id) is budget:
            del self._open[sandbox_id]

    def get(self, sandbox_id: str) -> RunBudget | None:
        return self._open.get(sandbox_id)
