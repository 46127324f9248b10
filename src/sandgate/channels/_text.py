"""What a chat shows of a run: short, readable text that fits a chat message.

Pure functions, no I/O: splitting a long answer at the message limit, shortening code blocks,
one line per code execution or tool call, and the text of an approval request. Everything
they receive is already redacted by the gateway (a run's output, an approval's arguments);
they only ever shorten it, never add anything from elsewhere.
"""

from __future__ import annotations

import json
from typing import Any

__all__ = [
    "MESSAGE_LIMIT",
    "approval_text",
    "decision_text",
    "outcome_text",
    "shorten_code_blocks",
    "split_message",
    "step_line",
]

#: Telegram's limit on one message's text, in characters.
MESSAGE_LIMIT = 4096
#: Lines of one code block shown before it is cut.
CODE_LINES = 12
#: Characters of an approval's arguments shown.
ARGUMENTS_CHARS = 600


def split_message(text: str, limit: int = MESSAGE_LIMIT) -> list[str]:
    """``text`` as messages of at most ``limit`` characters, cut at line ends; a single line
    longer than ``limit`` is cut at the limit. Empty text gives no message."""
    parts: list[str] = []
    current = ""
    for line in text.splitlines(keepends=True):
        while len(line) > limit:
            if current:
                parts.append(current)
                current = ""
            parts.append(line[:limit])
            line = line[limit:]
        if len(current) + len(line) > limit:
            parts.append(current)
            current = ""
        current += line
    if current:
        parts.append(current)
    return [p.rstrip("\n") for p in parts if p.strip()]


def shorten_code_blocks(text: str, max_lines: int = CODE_LINES) -> str:
    """``text`` with each fenced code block cut to ``max_lines`` lines, saying how many were
    left out: a chat is for the answer, the run's trace keeps the whole code."""
    out: list[str] = []
    block: list[str] | None = None
    for line in text.splitlines():
        if line.lstrip().startswith("```"):
            if block is None:
                block = []
                out.append(line)
                continue
            if len(block) > max_lines:
                left = len(block) - max_lines
                block = [*block[:max_lines], f"… ({left} more lines)"]
            out += [*block, line]
            block = None
            continue
        if block is None:
            out.append(line)
        else:
            block.append(line)
    if block is not None:  # an unclosed fence: shown like a closed one
        out += block[:max_lines]
    return "\n".join(out)


def step_line(kind: str, data: dict[str, Any]) -> str | None:
    """One short line for a code execution or tool call of a run, or None for other events."""
    if kind == "code.completed":
        output = (data.get("stdout") or "") + (data.get("stderr") or "")
        lines = len(output.splitlines())
        return (
            f"ran {data.get('language', 'code')}: exit {data.get('exit_code')}, "
            f"{lines} line{'s' if lines != 1 else ''} of output"
        )
    if kind == "tool.completed":
        action = f" {data['action']}" if data.get("action") else ""
        return f"{data.get('tool', '?')}{action}: {data.get('outcome', '?')}"
    return None


def outcome_text(final: str, data: dict[str, Any], steps: list[str]) -> str:
    """The reply for a finished run: the answer (code blocks shortened), or why there is
    none; then the steps it took, one line each."""
    if final == "run.completed":
        body = shorten_code_blocks(str(data.get("answer") or "")).strip() or "(no answer)"
    elif data.get("state") == "cancelled":
        body = "Cancelled."
    else:
        body = f"The run ended without an answer ({data.get('stop_reason')}): {data.get('error')}"
    if steps:
        body += "\n\n" + "\n".join(f"• {line}" for line in steps)
    return body


def approval_text(data: dict[str, Any]) -> str:
    """The request a person decides: tool, action, arguments (redacted by the gateway), rule
    and deadline."""
    action = f" {data['action']}" if data.get("action") else ""
    arguments = json.dumps(data.get("arguments") or {}, ensure_ascii=False, default=str)
    if len(arguments) > ARGUMENTS_CHARS:
        arguments = arguments[:ARGUMENTS_CHARS] + "…"
    return (
        f"Approval needed: {data.get('tool')}{action}\n"
        f"Arguments: {arguments}\n"
        f"Rule: {data.get('rule')}\n"
        f"Expires: {data.get('expires_at')}"
    )


def decision_text(request: str, state: str, by: str | None) -> str:
    """The approval message once decided (or expired), for editing it in place."""
    if state == "expired":
        return f"{request}\n\n⌛ Expired: nobody decided in time; the call was refused."
    mark = "✅ Approved" if state == "approved" else "❌ Denied"
    return f"{request}\n\n{mark}" + (f" by {by}" if by else "")
