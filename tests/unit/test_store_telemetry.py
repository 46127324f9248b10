"""Telemetry records against SQLite and the real PostgreSQL: metric samples by range and
newest, log entries as a bounded ring per sandbox, pruning by age and by the table's size."""

from __future__ import annotations

from collections.abc import Sequence

from sandgate.store import (
    NewLogEntry,
    SandboxLogEntry,
    SandboxMetricSample,
    Store,
    TelemetryRecords,
)
from tests.unit.test_store import (  # the sqlite/postgres fixture and the plan check
    assert_served_by_an_index,
    statements_on,
    store,  # noqa: F401
)


def _sample(sandbox_id: str, time_ms: int, cpu: float = 1.0) -> SandboxMetricSample:
    return SandboxMetricSample(
        sandbox_id=sandbox_id,
        time_ms=time_ms,
        cpu_count=1,
        cpu_used_pct=cpu,
        mem_used=1,
        mem_total=2,
        mem_cache=0,
        disk_used=3,
        disk_total=4,
    )


def _entry(
    sandbox_id: str, time_ms: int, message: str, size: int = 100, seq: int | None = None
) -> NewLogEntry:
    return NewLogEntry(sandbox_id, time_ms, "info", message, {"logger": "processSvc"}, size, seq)


def _messages(entries: Sequence[SandboxLogEntry]) -> list[str]:
    return [e.message for e in entries]


def test_samples_by_range_and_newest(store: Store) -> None:  # noqa: F811
    records = TelemetryRecords(store)
    records.add_samples(
        [_sample("a", t, cpu=t / 1000) for t in (1000, 2000, 3000)] + [_sample("b", 1500)]
    )
    assert [s.time_ms for s in records.samples("a", 1500, 3000, 100)] == [2000, 3000]
    assert [s.time_ms for s in records.samples("a", 0, 10_000, 2)] == [1000, 2000]
    assert records.count_samples("a", 0, 2500) == 2
    latest = records.latest_samples(["a", "b", "missing"])
    assert {k: v.time_ms for k, v in latest.items()} == {"a": 3000, "b": 1500}
    assert latest["a"].cpu_used_pct == 3.0
    assert records.latest_samples([]) == {}
    assert records.prune_samples(2500) == 3
    assert [s.time_ms for s in records.samples("a", 0, 10_000, 100)] == [3000]


def test_recent_samples_of_many_sandboxes_in_one_query(store: Store) -> None:  # noqa: F811
    records = TelemetryRecords(store)
    records.add_samples(
        [_sample("a", t) for t in (3000, 1000, 2000)] + [_sample("b", 500), _sample("c", 2500)]
    )
    recent = records.recent_samples(["a", "b", "missing"], 1500)
    assert {k: [s.time_ms for s in v] for k, v in recent.items()} == {"a": [2000, 3000]}
    assert records.recent_samples([], 0) == {}


def test_log_ring_keeps_the_newest_of_each_sandbox(store: Store) -> None:  # noqa: F811
    records = TelemetryRecords(store)
    records.add_log_entries([_entry("a", t, f"a{t}") for t in range(10)], ring=4)
    records.add_log_entries([_entry("b", 5, "b5")], ring=4)
    records.add_log_entries([_entry("a", 3, "late-but-old")], ring=4)
    assert _messages(records.log_entries("a", limit=100)) == ["a6", "a7", "a8", "a9"]
    records.add_log_entries([_entry("a", 20, "a20"), _entry("a", 20, "a20bis")], ring=4)
    assert _messages(records.log_entries("a", limit=100)) == ["a8", "a9", "a20", "a20bis"]
    assert _messages(records.log_entries("a", newest_first=True, limit=2)) == ["a20bis", "a20"]
    assert _messages(records.log_entries("a", start_ms=9, end_ms=19, limit=100)) == ["a9"]
    assert _messages(records.log_entries("b", limit=100)) == ["b5"]


def test_guest_cursor_survives_in_the_store(store: Store) -> None:  # noqa: F811
    records = TelemetryRecords(store)
    assert records.last_guest_seq("a") == 0
    records.add_log_entries(
        [_entry("a", 1, "x", seq=7), _entry("a", 2, "y", seq=9), _entry("a", 3, "gw")], ring=10
    )
    assert records.last_guest_seq("a") == 9


def test_prune_by_age_then_by_the_tables_size(store: Store) -> None:  # noqa: F811
    records = TelemetryRecords(store)
    records.add_log_entries([_entry("old", t, f"o{t}", size=100) for t in range(5)], ring=100)
    records.add_log_entries(
        [_entry("new", 1000 + t, f"n{t}", size=100) for t in range(10)], ring=100
    )
    assert records.log_bytes() == 1500
    assert records.prune_logs(before_ms=3, max_total_bytes=10_000) == 3
    assert _messages(records.log_entries("old", limit=100)) == ["o3", "o4"]
    # Over the cap: the oldest written entries go first, whichever sandbox they belong to.
    removed = records.prune_logs(before_ms=0, max_total_bytes=650)
    assert removed == 6
    assert records.log_bytes() <= 650
    assert _messages(records.log_entries("old", limit=100)) == []
    assert _messages(records.log_entries("new", limit=100)) == [f"n{t}" for t in range(4, 10)]


def test_the_retention_prunes_are_served_by_an_index(store: Store) -> None:  # noqa: F811
    # Each prune runs every minute and deletes by age; SQLite holds the write lock for the whole
    # statement, so one that read every row (a day of samples at 500 sandboxes: 8.6 million)
    # would hold every create, kill and audit record for as long.
    records = TelemetryRecords(store)
    records.add_samples([_sample("a", t) for t in range(300)])
    records.add_log_entries([_entry("a", t, f"m{t}", seq=t + 1) for t in range(300)], ring=1000)
    with statements_on(store, "sandbox_metrics") as samples:
        assert records.prune_samples(100) == 100
    with statements_on(store, "sandbox_log_entries") as logs:
        assert records.prune_logs(100, 10**9) == 100
    deletes = [(sql, params) for sql, params in samples + logs if sql.startswith("DELETE")]
    assert len(deletes) == 2
    assert_served_by_an_index(store, "sandbox_metrics", deletes[:1])
    assert_served_by_an_index(store, "sandbox_log_entries", deletes[1:])
