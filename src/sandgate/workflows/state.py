"""The states of a workflow run and of its steps, and the one table of moves between them.

Run::

    queued ─▶ running ─▶ completed
      │         ├──────▶ failed        (a step failed, a budget ran out, an input was bad)
      │         ├──────▶ interrupted   (a non-idempotent step was cut off by a crash)
      │         ├──────▶ timed_out     (the workflow's timeout_s passed)
      └─────────┴──────▶ cancelled     (``sandgate workflows cancel``)
    failed | interrupted | timed_out | cancelled ──retry──▶ queued

Step::

    pending ─▶ running ─▶ completed
      │          │ ▲ ───▶ failed | interrupted | cancelled
      │          ▼ │
      │        waiting     (an approval step, waiting for a person)
      └─▶ skipped | cancelled
    failed | interrupted | cancelled ──retry──▶ pending

A move that is not in the table is refused without error: a run replayed after a crash asks
for moves it already made (``completed`` → ``running``) and those must change nothing.
"""

from __future__ import annotations

import enum

__all__ = [
    "FINAL_RUN_STATES",
    "RUN_MOVES",
    "STEP_MOVES",
    "RunState",
    "StepState",
]


class RunState(enum.StrEnum):
    QUEUED = "queued"  #: recorded; its DBOS workflow is about to start
    RUNNING = "running"  #: steps are being scheduled
    COMPLETED = "completed"  #: final: every step completed or was skipped
    FAILED = "failed"  #: final until retried: a step failed (``failed_step``) or a budget ran out
    INTERRUPTED = "interrupted"  #: final until retried: a non-idempotent step was cut off
    TIMED_OUT = "timed_out"  #: final until retried: the workflow's timeout_s passed
    CANCELLED = "cancelled"  #: final until retried: someone cancelled it


class StepState(enum.StrEnum):
    PENDING = "pending"  #: waiting for the steps it depends on
    RUNNING = "running"  #: executing (or its for_each elements are)
    WAITING = "waiting"  #: an approval step waiting for a person
    COMPLETED = "completed"  #: final: ``output`` holds its result
    SKIPPED = "skipped"  #: final: its ``when:`` was false (output null)
    FAILED = "failed"  #: the step's error stopped the run
    INTERRUPTED = "interrupted"  #: cut off by a crash; not re-run blindly (not idempotent)
    CANCELLED = "cancelled"  #: the run was cancelled or timed out before it finished


FINAL_RUN_STATES = frozenset(
    {
        RunState.COMPLETED,
        RunState.FAILED,
        RunState.INTERRUPTED,
        RunState.TIMED_OUT,
        RunState.CANCELLED,
    }
)
_RETRYABLE_RUN = {RunState.FAILED, RunState.INTERRUPTED, RunState.TIMED_OUT, RunState.CANCELLED}

RUN_MOVES: dict[RunState, frozenset[RunState]] = {
    RunState.QUEUED: frozenset({RunState.RUNNING, RunState.CANCELLED, RunState.FAILED}),
    RunState.RUNNING: frozenset(FINAL_RUN_STATES),
    RunState.COMPLETED: frozenset(),
    **{state: frozenset({RunState.QUEUED}) for state in _RETRYABLE_RUN},
}

STEP_MOVES: dict[StepState, frozenset[StepState]] = {
    StepState.PENDING: frozenset(
        {StepState.RUNNING, StepState.SKIPPED, StepState.CANCELLED, StepState.FAILED}
    ),
    StepState.RUNNING: frozenset(
        {
            StepState.WAITING,
            StepState.COMPLETED,
            StepState.FAILED,
            StepState.INTERRUPTED,
            StepState.CANCELLED,
        }
    ),
    StepState.WAITING: frozenset(
        {
            StepState.RUNNING,
            StepState.COMPLETED,
            StepState.FAILED,
            StepState.INTERRUPTED,
            StepState.CANCELLED,
        }
    ),
    StepState.COMPLETED: frozenset(),
    StepState.SKIPPED: frozenset(),
    StepState.FAILED: frozenset({StepState.PENDING}),
    StepState.INTERRUPTED: frozenset({StepState.PENDING}),
    StepState.CANCELLED: frozenset({StepState.PENDING}),
}
