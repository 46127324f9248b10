"""Jupyter IOPub messages → the NDJSON events of ``POST /execute`` (contract §4.2)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

__all__ = ["Event", "error_event", "event_for", "now_iso", "result_event"]

Event = dict[str, Any]

_MIME_KEYS = {
    "text/plain": "text",
    "text/html": "html",
    "text/markdown": "markdown",
    "image/svg+xml": "svg",
    "image/png": "png",
    "image/jpeg": "jpeg",
    "application/pdf": "pdf",
    "text/latex": "latex",
    "application/json": "json",
    "application/javascript": "javascript",
    "e2b/data": "data",
    "e2b/chart": "chart",
}


def now_iso() -> str:
    return datetime.now(UTC).isoformat()


def _strip_quotes(text: str) -> str:
    if len(text) >= 2 and text[0] == text[-1] and text[0] in "'\"":
        return text[1:-1]
    return text


def result_event(data: dict[str, Any], *, is_main_result: bool) -> Event:
    """A ``result`` event from a MIME bundle: known types under their keys, the rest in
    ``extra``."""
    event: Event = {"type": "result", "is_main_result": is_main_result}
    extra: dict[str, Any] = {}
    for mime, value in data.items():
        key = _MIME_KEYS.get(mime)
        if key is None:
            extra[mime] = value
        elif key == "text":
            event[key] = _strip_quotes(value if isinstance(value, str) else str(value))
        else:
            event[key] = value
    event["extra"] = extra
    return event


def error_event(name: str, value: str, traceback: str) -> Event:
    return {"type": "error", "name": name, "value": value, "traceback": traceback}


def event_for(msg_type: str, content: dict[str, Any]) -> Event | None:
    """The event for one IOPub message of the running cell, or ``None`` for messages the
    contract has no event for (status, clear_output, comms, ...)."""
    if msg_type == "execute_input":
        return {"type": "number_of_executions", "execution_count": content.get("execution_count")}
    if msg_type == "stream":
        kind = "stderr" if content.get("name") == "stderr" else "stdout"
        return {"type": kind, "text": str(content.get("text", "")), "timestamp": now_iso()}
    if msg_type == "execute_result":
        return result_event(dict(content.get("data") or {}), is_main_result=True)
    if msg_type in ("display_data", "update_display_data"):
        return result_event(dict(content.get("data") or {}), is_main_result=False)
    if msg_type == "error":
        traceback = content.get("traceback") or []
        return error_event(
            str(content.get("ename", "Error")),
            str(content.get("evalue", "")),
            "\n".join(str(line) for line in traceback),
        )
    return None
