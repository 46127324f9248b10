"""The console's view helpers: a workflow drawn by depth, a run's events as cards."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from sandgate.console._views import age, dag_levels, describe_event, parse_time, remaining
from sandgate.errors import InvalidRequest
from sandgate.store import WorkflowStepRecord


def _step(step_id: str, position: int, *depends_on: str) -> WorkflowStepRecord:
    return WorkflowStepRecord(
        run_id="r",
        step_id=step_id,
        kind="tool",
        state="pending",
        position=position,
        depends_on=list(depends_on),
    )


def test_steps_are_grouped_by_their_deepest_dependency() -> None:
    steps = [
        _step("fetch", 0),
        _step("parse", 1, "fetch"),
        _step("notify", 2),
        _step("report", 3, "parse", "notify"),
    ]
    levels = [[s.step_id for s in level] for level in dag_levels(steps)]
    assert levels == [["fetch", "notify"], ["parse"], ["report"]]


def test_a_cycle_or_unknown_dependency_does_not_loop_forever() -> None:
    steps = [_step("a", 0, "b"), _step("b", 1, "a"), _step("c", 2, "missing")]
    assert sorted(s.step_id for level in dag_levels(steps) for s in level) == ["a", "b", "c"]


def test_a_model_call_card_shows_its_tokens_and_a_tool_card_its_decision() -> None:
    model = describe_event(
        "text.delta",
        {"step": 1, "model": "m", "text": "hi", "prompt_tokens": 12, "completion_tokens": 3},
    )
    assert model.kind == "model" and ("prompt tokens", "12") in model.facts
    tool = describe_event(
        "tool.completed",
        {"step": 2, "tool": "kv", "outcome": "denied", "rule": "r1", "arguments": {"k": 1}},
    )
    assert ("decision", "denied") in tool.facts and ("rule", "r1") in tool.facts
    assert tool.blocks[0][0] == "arguments"
    other = describe_event("something.new", {"x": 1})
    assert other.kind == "other" and '"x": 1' in other.blocks[0][1]


def test_times_and_ages() -> None:
    now = datetime.now(UTC)
    assert age(now - timedelta(minutes=5, seconds=3)) == "5m"
    assert remaining(now - timedelta(seconds=1)) == "due"
    assert remaining(now + timedelta(hours=2, minutes=1)) == "in 2h"
    assert parse_time("since", "2026-12-01T10:00") == datetime(2026, 12, 1, 10, tzinfo=UTC)
    assert parse_time("since", "") is None
    with pytest.raises(InvalidRequest, match="since must be a time"):
        parse_time("since", "yesterday")
