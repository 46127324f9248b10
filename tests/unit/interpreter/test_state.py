"""What a server saves for the next one: contexts, leftover kernels (real processes)."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

from sandgate.interpreter._state import (
    KernelRecord,
    SavedContext,
    State,
    StateFile,
    process_start_time,
    stop_leftover,
)


def test_state_round_trips_and_replaces_the_file_whole(tmp_path: Path) -> None:
    state_file = StateFile(tmp_path / "deep" / "state.json")
    state = State(
        [
            SavedContext("a", "python", "/home/user", None, True),
            SavedContext("b", "r", "/tmp", "root", False),
        ],
        [KernelRecord(123, 456)],
    )
    state_file.save(state)
    assert state_file.load() == state
    assert [p.name for p in (tmp_path / "deep").iterdir()] == ["state.json"], "no temp left"


def test_a_missing_or_damaged_file_means_a_fresh_start(tmp_path: Path) -> None:
    path = tmp_path / "state.json"
    assert StateFile(path).load() == State()
    for damaged in (
        "{not json",
        "[]",
        '{"version": 99, "contexts": []}',
        '{"version": 1, "contexts": [{"id": "x"}]}',
    ):
        path.write_text(damaged)
        assert StateFile(path).load() == State(), damaged


def test_a_leftover_kernel_group_is_stopped_and_a_reused_pid_is_not(tmp_path: Path) -> None:
    # A "kernel" as jupyter_client starts one: its own session, with a child of its own.
    kernel = subprocess.Popen(["sh", "-c", "sleep 60 & wait"], start_new_session=True)
    try:
        started = process_start_time(kernel.pid)
        assert started is not None
        assert stop_leftover(KernelRecord(kernel.pid, started + 1)) is False
        assert kernel.poll() is None, "a process that started at another time is not ours"
        assert stop_leftover(KernelRecord(kernel.pid, started)) is True
        assert kernel.wait(timeout=10) == -signal.SIGKILL
        deadline = time.monotonic() + 10
        while _group_alive(kernel.pid):
            assert time.monotonic() < deadline, "the kernel's children must go too"
            time.sleep(0.05)
        assert stop_leftover(KernelRecord(kernel.pid, started)) is False
    finally:
        if kernel.poll() is None:
            os.killpg(kernel.pid, signal.SIGKILL)
            kernel.wait()


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    return True
