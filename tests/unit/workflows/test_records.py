"""Run and step records: every state change is a move checked against one table, so a run
replayed after a crash rewrites nothing and adds no event twice (SQLite and PostgreSQL)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from sandgate.store import Store, WorkflowRecords, WorkflowRun, WorkflowStepRecord
from sandgate.workflows import RunState, StepState
from sandgate.workflows.state import RUN_MOVES, STEP_MOVES
from tests.unit.test_store import store  # noqa: F401 (the sqlite | postgres fixture)


def records(opened: Store) -> tuple[WorkflowRecords, list[str]]:
    woken: list[str] = []
    return (
        WorkflowRecords(opened, run_moves=RUN_MOVES, step_moves=STEP_MOVES, on_event=woken.append),
        woken,
    )


def add(records: WorkflowRecords, run_id: str = "wfr_1") -> WorkflowRun:
    now = datetime.now(UTC)
    run = WorkflowRun(
        id=run_id,
        workflow="w",
        team_id="t",
        api_key_id=None,
        state="queued",
        trigger="api",
        inputs={},
        definition={},
        output=None,
        error=None,
        error_code=None,
        failed_step=None,
        attempt=1,
        parent_run_id=None,
        tool_calls=0,
        tokens=0,
        created_at=now,
        started_at=None,
        ended_at=None,
        deadline_at=now + timedelta(hours=1),
    )
    step = WorkflowStepRecord(
        run_id=run_id,
        step_id="a",
        kind="tool",
        state="pending",
        attempt=1,
        position=0,
        depends_on=[],
        started_at=None,
        ended_at=None,
        output=None,
        summary=None,
        error=None,
        error_code=None,
        items_total=None,
        items_done=0,
        item_outputs={},
        detail={},
    )
    return records.add_run(run, [step])


def test_moves_are_idempotent_and_follow_the_table(store: Store) -> None:  # noqa: F811
    rec, woken = records(store)
    add(rec)
    assert add(rec).state == "queued"  # adding again returns the run, adds nothing
    assert rec.move_run("wfr_1", RunState.RUNNING.value)
    assert not rec.move_run("wfr_1", RunState.RUNNING.value)  # a replay: no change
    assert rec.move_step("wfr_1", "a", StepState.RUNNING.value, attempt=1)
    assert rec.move_step("wfr_1", "a", StepState.COMPLETED.value, attempt=1, output={"x": 1})
    # A replay asking for moves already made (running, completed again) changes nothing.
    assert not rec.move_step("wfr_1", "a", StepState.RUNNING.value, attempt=1)
    assert not rec.move_step("wfr_1", "a", StepState.COMPLETED.value, attempt=1, output=None)
    assert rec.step("wfr_1", "a").output == {"x": 1}  # type: ignore[union-attr]
    assert rec.move_run("wfr_1", RunState.COMPLETED.value)
    assert not rec.move_run("wfr_1", RunState.FAILED.value)  # completed is final
    kinds = [e.type for e in rec.events("wfr_1")]
    assert kinds == ["run.queued", "run.running", "step.running", "step.completed", "run.completed"]
    assert woken.count("wfr_1") == len(kinds)


def test_retry_keeps_completed_steps_and_ignores_older_attempts(store: Store) -> None:  # noqa: F811
    rec, _ = records(store)
    add(rec)
    rec.move_run("wfr_1", RunState.RUNNING.value)
    rec.move_step("wfr_1", "a", StepState.RUNNING.value, attempt=1)
    rec.move_step("wfr_1", "a", StepState.INTERRUPTED.value, attempt=1, error="cut off")
    rec.move_run("wfr_1", RunState.INTERRUPTED.value, failed_step="a")
    assert rec.reset_for_retry(
        "wfr_1", 2, run_to="queued", step_to="pending", kept=("completed", "skipped")
    )
    step = rec.step("wfr_1", "a")
    assert step is not None and (step.state, step.attempt, step.error) == ("pending", 2, None)
    assert not rec.move_step("wfr_1", "a", StepState.RUNNING.value, attempt=1)  # stale attempt
    assert rec.move_step("wfr_1", "a", StepState.RUNNING.value, attempt=2)
    assert not rec.reset_for_retry("wfr_1", 3, run_to="queued", step_to="pending", kept=())
    run = rec.run("wfr_1")
    assert run is not None and run.failed_step is None and run.attempt == 2


def test_for_each_elements_are_recorded_once(store: Store) -> None:  # noqa: F811
    rec, _ = records(store)
    add(rec)
    rec.update_step("wfr_1", "a", items_total=3)
    assert rec.item_done("wfr_1", "a", 1, "one", attempt=1)
    assert not rec.item_done("wfr_1", "a", 1, "again", attempt=1)
    step = rec.step("wfr_1", "a")
    assert step is not None and step.item_outputs == {"1": "one"} and step.items_done == 1
