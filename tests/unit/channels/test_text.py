"""What a chat shows of a run: splitting, shortening, step lines and approval text."""

from __future__ import annotations

from sandgate.channels._text import (
    MESSAGE_LIMIT,
    approval_text,
    decision_text,
    outcome_text,
    shorten_code_blocks,
    split_message,
    step_line,
)


def test_short_text_is_one_message() -> None:
    assert split_message("hello\nworld") == ["hello\nworld"]
    assert split_message("") == []


def test_long_text_splits_on_line_boundaries_within_the_limit() -> None:
    lines = [f"line {n:04d} " + "x" * 50 for n in range(300)]  # ~18 000 characters
    parts = split_message("\n".join(lines))
    assert len(parts) > 1
    assert all(len(p) <= MESSAGE_LIMIT for p in parts)
    # No line is cut, none is lost or repeated, order kept.
    assert [line for p in parts for line in p.split("\n")] == lines


def test_a_line_longer_than_the_limit_is_cut_at_the_limit() -> None:
    parts = split_message("a" * 10_000, limit=4096)
    assert [len(p) for p in parts] == [4096, 4096, 1808]
    assert "".join(parts) == "a" * 10_000


def test_long_code_blocks_are_shortened_and_say_how_much() -> None:
    code = "\n".join(f"print({n})" for n in range(40))
    text = f"Here:\n```python\n{code}\n```\nDone."
    short = shorten_code_blocks(text, max_lines=5)
    assert "print(4)" in short and "print(5)" not in short
    assert "… (35 more lines)" in short
    assert short.startswith("Here:\n```python") and short.endswith("```\nDone.")
    assert shorten_code_blocks("```\na\nb\n```") == "```\na\nb\n```"


def test_step_lines_summarise_code_and_tool_calls_without_their_output() -> None:
    ran = step_line(
        "code.completed",
        {"language": "python", "exit_code": 0, "stdout": "a\nb\n" + "secret-ish " * 100},
    )
    assert ran == "ran python: exit 0, 3 lines of output"
    assert step_line("tool.completed", {"tool": "kv", "action": "get", "outcome": "allowed"}) == (
        "kv get: allowed"
    )
    assert step_line("text.delta", {"text": "x"}) is None


def test_outcome_text_gives_the_answer_or_why_there_is_none() -> None:
    done = outcome_text("run.completed", {"answer": "**42**"}, ["kv get: allowed"])
    assert done == "**42**\n\n• kv get: allowed"
    failed = outcome_text(
        "run.failed", {"state": "stopped", "stop_reason": "max_steps", "error": "step limit"}, []
    )
    assert "max_steps" in failed and "step limit" in failed
    assert outcome_text("run.failed", {"state": "cancelled"}, []) == "Cancelled."


def test_approval_text_names_the_call_and_cuts_long_arguments() -> None:
    text = approval_text(
        {
            "tool": "kv",
            "action": "set",
            "arguments": {"key": "user:1", "value": "v" * 2000},
            "rule": "autonomy-suggest",
            "expires_at": "2026-12-02T10:00:00+00:00",
        }
    )
    assert text.startswith("Approval needed: kv set\n")
    assert '"key": "user:1"' in text and text.count("v") < 700
    assert "Rule: autonomy-suggest" in text
    assert decision_text("req", "approved", "telegram:1") == "req\n\n✅ Approved by telegram:1"
    assert "Denied" in decision_text("req", "denied", None)
    assert "Expired" in decision_text("req", "expired", None)
