"""The guest's process log (``guest._journal``): what it records and that it stays bounded,
alone and through the real daemon's ``logs`` operation."""

from __future__ import annotations

import json

import pytest

from sandgate.guest._journal import (
    MAX_BYTES,
    MAX_ENTRIES,
    MAX_LINE,
    PROCESS_BUDGET_LINES,
    REPLY_BYTES,
    TRUNCATED,
    Journal,
)

from .conftest import RunningGuest
from .helpers import run, run_cmd

pytestmark = pytest.mark.timeout(60)

END = {"exit_code": 0, "exited": True, "status": "exit status 0", "timed_out": False}


def _entries(journal: Journal, after: int = 0) -> list[list[object]]:
    entries: list[list[object]] = json.loads(journal.reply(after))["entries"]
    return entries


def _messages(journal: Journal) -> list[tuple[object, object, object]]:
    return [(e[3], e[5], e[6]) for e in _entries(journal)]


def test_a_process_is_recorded_start_lines_end() -> None:
    journal = Journal()
    journal.started(7, ["/bin/bash", "-c", "echo hi"], "user", "t1", False)
    journal.output(7, "stdout", b"hel")
    journal.output(7, "stdout", b"lo\r\nwor")
    journal.output(7, "stderr", b"oops\n\n")
    journal.ended(7, {**END, "exit_code": 3, "status": "exit status 3"})
    assert _messages(journal) == [
        ("process_start", None, "Process with pid 7 started"),
        ("process_output", "stdout", "hello"),
        ("process_output", "stderr", "oops"),
        ("process_output", "stdout", "wor"),
        ("process_end", None, "Process with pid 7 ended"),
    ]
    start, *_, end = _entries(journal)
    assert start[7] == {"command": "/bin/bash -c echo hi", "user": "user", "tag": "t1"}
    assert end[7] == {"exit_code": 3, "status": "exit status 3", "exited": True}
    assert [e[0] for e in _entries(journal)] == [1, 2, 3, 4, 5]


def test_invalid_utf8_is_replaced_and_long_lines_are_cut() -> None:
    journal = Journal()
    journal.started(1, ["x"], "user", None, False)
    journal.output(1, "stdout", b"\xff\xfebad\n" + b"a" * (MAX_LINE * 2 + 10) + b"\n")
    journal.ended(1, END)
    lines = [m for kind, _, m in _messages(journal) if kind == "process_output"]
    assert lines[0] == "\ufffd\ufffdbad"
    assert [len(str(line)) for line in lines[1:]] == [MAX_LINE, MAX_LINE, 10]


def test_pty_output_is_not_recorded() -> None:
    journal = Journal()
    journal.started(2, ["/bin/bash", "-i"], "user", None, True)
    journal.output(2, "stdout", b"typed\n")  # the table never feeds PTY bytes; nothing is open
    journal.ended(2, END)
    assert [kind for kind, _, _ in _messages(journal)] == ["process_start", "process_end"]
    assert _entries(journal)[0][7] == {"command": "/bin/bash -i", "user": "user", "pty": "true"}


def test_a_process_past_its_budget_gets_one_warning() -> None:
    journal = Journal()
    journal.started(3, ["yes"], "user", None, False)
    for _ in range(5):
        journal.output(3, "stdout", b"y\n" * PROCESS_BUDGET_LINES)
    journal.ended(3, END)
    entries = _entries(journal)
    warnings = [e for e in entries if e[2] == "warn"]
    assert len(warnings) == 1 and warnings[0][6] == TRUNCATED
    assert len(entries) <= MAX_ENTRIES
    assert entries[-1][3] == "process_end"


def test_the_ring_drops_the_oldest_and_says_where_it_starts() -> None:
    journal = Journal()
    for pid in range(MAX_ENTRIES + 100):
        journal.started(pid, ["true"], "user", None, True)
    reply = json.loads(journal.reply(0))
    assert len(reply["entries"]) <= MAX_ENTRIES
    assert reply["first"] > 1 and reply["last"] == MAX_ENTRIES + 100
    assert reply["entries"][0][0] == reply["first"]


def test_the_ring_is_bounded_in_bytes_and_replies_in_parts() -> None:
    journal = Journal()
    for pid in range(400):
        journal.started(pid, ["p"], "user", None, False)
        journal.output(pid, "stdout", b"z" * (MAX_LINE - 1) + b"\n")
    held = sum(len(str(e[6])) for e in _entries(journal, 0))
    assert held <= MAX_BYTES
    reply = json.loads(journal.reply(0))
    assert reply["more"] is True
    assert len(journal.reply(0)) < REPLY_BYTES + 64 * 1024
    rest = json.loads(journal.reply(reply["entries"][-1][0]))
    assert rest["entries"][0][0] == reply["entries"][-1][0] + 1


def test_the_daemon_answers_logs_after_a_cursor(guest: RunningGuest) -> None:
    marker = "journal-marker"

    async def body() -> tuple[dict[str, object], dict[str, object], int]:
        before = await guest.client.logs(0)
        out, _, end = await run_cmd(guest.client, f"echo {marker}; echo err >&2; exit 4")
        assert out == f"{marker}\n".encode() and end.exit_code == 4
        after = await guest.client.logs(int(str(before["last"])))
        again = await guest.client.logs(int(str(after["last"])))
        return after, again, int(str(before["last"]))

    after, again, cursor = run(body())
    entries = after["entries"]
    assert isinstance(entries, list)
    assert [e[3] for e in entries] == [
        "process_start",
        "process_output",
        "process_output",
        "process_end",
    ]
    assert entries[0][0] == cursor + 1
    assert {(e[5], e[6]) for e in entries[1:3]} == {("stdout", marker), ("stderr", "err")}
    assert entries[3][7]["exit_code"] == 4
    assert again["entries"] == [], "nothing new after the cursor"


def test_the_daemon_refuses_a_bad_cursor(guest: RunningGuest) -> None:
    from sandgate.guest.client import GuestError

    for bad in (-1, "3", True):
        with pytest.raises(GuestError) as caught:
            run(guest.client.logs(bad))  # type: ignore[arg-type]
        assert caught.value.connect == "invalid_argument"
