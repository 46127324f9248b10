"""Telemetry's pure parts: what a sample says given two readings, how entries from the guest
(which speaks for an untrusted sandbox) are checked before they are stored, and where a
collection resumes."""

from __future__ import annotations

import asyncio
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from sandgate.api.e2b.metrics import MAX_POINTS, _thin
from sandgate.config import SandboxLogsConfig
from sandgate.runtimes import SandboxStats
from sandgate.store import NewLogEntry, Sandbox, SandboxMetricSample, Store, TelemetryRecords
from sandgate.telemetry import SandboxLogs, level_at_least
from sandgate.telemetry.metrics import to_sample

MIB = 1024 * 1024


def _row(**extra: Any) -> Sandbox:
    values: dict[str, Any] = dict(
        id="sbx",
        team_id="t",
        api_key_id=None,
        template_id="t",
        alias="base",
        state="running",
        runtime="docker",
        runtime_ref=None,
        access_token="tok",
        metadata_={},
        cpu_count=2,
        memory_mb=512,
        disk_size_mb=1024,
        envd_version="0.6.4",
        allow_internet_access=False,
        started_at=datetime.now(UTC) - timedelta(seconds=10),
        end_at=datetime.now(UTC) + timedelta(seconds=300),
        ended_at=None,
    )
    values.update(extra)
    return Sandbox(**values)


def _stats(cpu_ns: int | None, taken: float, **extra: int) -> SandboxStats:
    values = dict(mem_usage=300 * MIB, mem_cache=120 * MIB, disk_used=100 * MIB, disk_total=MIB)
    values.update(extra)
    return SandboxStats(cpu_ns=cpu_ns, taken=taken, **values)


def test_cpu_share_between_two_readings_is_of_the_sandboxs_cpus() -> None:
    now_ms = int(time.time() * 1000)
    previous = _stats(1_000_000_000, 100.0)
    one_cpu_busy = to_sample(_row(), _stats(3_000_000_000, 102.0), previous, now_ms)
    assert one_cpu_busy.cpu_used_pct == 50.0, "1 of 2 CPUs busy for 2 s"
    assert one_cpu_busy.cpu_count == 2
    assert one_cpu_busy.mem_used == 180 * MIB, "charged memory less page cache"
    assert one_cpu_busy.mem_cache == 20 * MIB, "page cache less the disk (reported as disk)"
    assert one_cpu_busy.mem_total == 512 * MIB
    assert (one_cpu_busy.disk_used, one_cpu_busy.disk_total) == (100 * MIB, MIB)
    # No previous reading: the average since the sandbox started (10 s ago, 2 CPUs).
    first = to_sample(_row(), _stats(4_000_000_000, 50.0), None, now_ms)
    assert 19.0 <= first.cpu_used_pct <= 20.5
    # Never beyond 0-100, whatever the counters say (a reset, a warm sandbox's history).
    assert to_sample(_row(), _stats(0, 103.0), previous, now_ms).cpu_used_pct == 0.0
    huge = _stats(10**15, 102.0)
    assert to_sample(_row(), huge, previous, now_ms).cpu_used_pct == 100.0
    assert to_sample(_row(), _stats(None, 1.0), None, now_ms).cpu_used_pct == 0.0


def test_many_samples_are_averaged_down() -> None:
    samples = [
        SandboxMetricSample(
            sandbox_id="s",
            time_ms=i * 1000,
            cpu_count=1,
            cpu_used_pct=float(i % 2) * 100,
            mem_used=i,
            mem_total=10,
            mem_cache=0,
            disk_used=0,
            disk_total=10,
        )
        for i in range(2 * MAX_POINTS + 2)
    ]
    thin = _thin(samples)
    assert len(thin) <= MAX_POINTS
    assert thin[0].time_ms == 2000 and thin[0].cpu_used_pct == 33.33
    assert thin[-1].time_ms == samples[-1].time_ms
    assert _thin(samples[:5]) == samples[:5]


def test_levels_order() -> None:
    assert level_at_least("error", "warn") and level_at_least("warn", "warn")
    assert not level_at_least("info", "warn") and level_at_least("debug", "debug")


def _logs(tmp_path: Path) -> SandboxLogs:
    store = Store.open(f"sqlite:///{tmp_path / 'store.db'}")
    return SandboxLogs(SandboxLogsConfig(), store, lambda _: None)  # type: ignore[arg-type,return-value]


def test_guest_entries_are_checked_and_made_storable(tmp_path: Path) -> None:
    logs = _logs(tmp_path)
    now = time.time()
    good = [1, now, "info", "process_output", 5, "stdout", "ok", None]
    reply = {
        "first": 1,
        "last": 12,
        "more": False,
        "entries": [
            good,
            [2, now, "info", "process_output", 5, "stdout", "nul\x00and\ud800lone", None],
            [3, now + 3600, "info", "process_start", 5, None, "future", None],
            [4, 0, "info", "process_start", 5, None, "ancient", None],
            [5, now, "fatal", "process_output", 5, None, "bad level", None],
            [6, now, "info", "sandbox_killed", 5, None, "forged lifecycle", None],
            [7, now, "info", "process_output", "5", None, "pid as text", None],
            [8, now, "info", "process_output", 5, "tty", "bad stream", None],
            [9, now, "info", "process_output", 5, None, "x" * 100_000, None],
            [
                10,
                now,
                "info",
                "process_end",
                5,
                None,
                "fields",
                {
                    "logger": "sandboxSvc",
                    "exit_code": 3,
                    "ok": True,
                    "nested": {"a": 1},
                    "bad key!": "v",
                    **{f"k{i}": "v" for i in range(40)},
                },
            ],
            [10, now, "info", "process_output", 5, None, "replayed seq", None],
            ["11", now, "info", "process_output", 5, None, "seq as text", None],
            [12, now, "info", "process_output", 5, None],
        ],
    }
    entries, cursor, more = logs._parse("sbx", reply, 0)
    assert (cursor, more) == (12, False), "refused entries are not asked for again"
    by_seq = {e.guest_seq: e for e in entries}
    assert set(by_seq) == {1, 2, 3, 4, 9, 10}
    assert by_seq[1].fields == {
        "logger": "processSvc",
        "event_type": "process_output",
        "pid": "5",
        "stream": "stdout",
    }
    assert "\x00" not in by_seq[2].message and "\ud800" not in by_seq[2].message
    assert by_seq[2].message.startswith("nul")
    now_ms = int(time.time() * 1000)
    assert by_seq[3].time_ms <= now_ms, "no entry from the future"
    assert by_seq[4].time_ms >= now_ms - 25 * 3600 * 1000, "none older than the retention"
    assert len(by_seq[9].message) == 8192
    fields = by_seq[10].fields
    assert fields["logger"] == "processSvc", "the guest cannot pass as the gateway"
    assert fields["exit_code"] == "3" and fields["ok"] == "true"
    assert "nested" not in fields and "bad key!" not in fields
    assert len(fields) <= 16
    assert all(e.size > len(e.message) for e in entries)


def test_dropped_entries_are_reported_once(tmp_path: Path) -> None:
    logs = _logs(tmp_path)
    now = time.time()
    reply = {
        "first": 41,
        "last": 42,
        "more": True,
        "entries": [
            [41, now, "info", "process_output", 1, "stdout", "a", None],
            [42, now, "info", "process_output", 1, "stdout", "b", None],
        ],
    }
    entries, cursor, more = logs._parse("sbx", reply, 10)
    assert (cursor, more) == (42, True)
    assert entries[0].level == "warn" and entries[0].fields["count"] == "30"
    assert [e.message for e in entries[1:]] == ["a", "b"]
    nothing, same, _ = logs._parse("sbx", {"first": 43, "last": 42, "entries": []}, 42)
    assert (nothing, same) == ([], 42)
    bad, kept, _ = logs._parse("sbx", {"first": "1", "last": 2, "entries": []}, 5)
    assert (bad, kept) == ([], 5)


class _Journal:
    """A guest whose process log holds entries 1-4 and answers what follows ``after``."""

    def __init__(self) -> None:
        self.asked: list[int] = []

    async def logs(self, after: int, *, timeout_s: float) -> dict[str, Any]:
        self.asked.append(after)
        now = time.time()
        rows = [[seq, now, "info", "process_output", 1, "stdout", f"line {seq}", None]
                for seq in range(after + 1, 5)]  # fmt: skip
        return {"first": 1, "last": 4, "more": False, "entries": rows}


def test_a_new_sandbox_resumes_at_the_start_and_a_known_one_where_the_store_says(
    tmp_path: Path,
) -> None:
    store = Store.open(f"sqlite:///{tmp_path / 'store.db'}")
    journal = _Journal()
    logs = SandboxLogs(SandboxLogsConfig(), store, lambda _: journal)  # type: ignore[arg-type,return-value]
    records = TelemetryRecords(store)

    async def body() -> None:
        looked: list[str] = []
        real = records.last_guest_seq
        logs._records.last_guest_seq = lambda sid: looked.append(sid) or real(sid)  # type: ignore[method-assign]
        logs.begin("new")
        assert await logs.collect("new") == 4
        assert looked == [] and journal.asked == [0]  # a new id: nothing stored to look up
        logs.begin("new")  # a second begin never rewinds a collection under way
        assert await logs.collect("new") == 0 and journal.asked[-1] == 4

        # A sandbox this process did not start (the gateway restarted): where the store says.
        records.add_log_entries([NewLogEntry("old", 1, "info", "x", {}, 70, 2)], ring=100)
        assert await logs.collect("old") == 2
        assert looked == ["old"] and journal.asked[-1] == 2

    asyncio.run(body())
    assert [e.guest_seq for e in records.log_entries("new", limit=10)] == [1, 2, 3, 4]
