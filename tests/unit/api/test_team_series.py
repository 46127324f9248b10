"""Team metrics' sweep (``api.e2b.teams.team_series``): what each step of a range reports,
from sandboxes' create and end times."""

from __future__ import annotations

from datetime import UTC, datetime

from sandgate.api.e2b.teams import MAX_POINTS, MIN_STEP_S, team_series

T0 = 1_800_000_000


def at(seconds: float) -> datetime:
    return datetime.fromtimestamp(T0 + seconds, UTC)


def test_steps_count_the_most_sandboxes_alive_at_once_and_the_starts() -> None:
    lifetimes = [
        (at(-100), None),  # alive before the range and through it
        (at(1), at(3)),  # within the first step
        (at(2), at(12)),  # overlaps the first, ends in the third
        (at(11), None),  # started in the third step
    ]
    series = team_series(lifetimes, T0, T0 + 14, now=T0 + 20)
    assert series.step == MIN_STEP_S
    assert series.concurrent == [3, 2, 3]
    assert series.starts == [2, 0, 1]
    assert [series.rate(i) for i in range(3)] == [0.4, 0.0, 0.2]
    assert [series.at(i) for i in range(3)] == [T0, T0 + 5, T0 + 10]


def test_a_sandbox_replaced_at_the_same_instant_is_not_two_at_once() -> None:
    series = team_series([(at(0), at(2)), (at(2), None)], T0, T0 + 4, now=T0 + 10)
    assert series.concurrent == [1]


def test_sandboxes_created_after_the_range_are_not_counted() -> None:
    series = team_series([(at(5), None)], T0, T0 + 4, now=T0 + 10)
    assert series.concurrent == [0] and series.starts == [0]


def test_a_long_range_has_at_most_max_points_steps() -> None:
    series = team_series([], T0, T0 + 31 * 86400, now=T0)
    assert len(series.concurrent) <= MAX_POINTS
    assert series.step * len(series.concurrent) >= 31 * 86400
