"""Jupyter message → NDJSON event translation (contract §4.2), without a kernel."""

from __future__ import annotations

from datetime import datetime

from sandgate.interpreter._events import event_for, result_event


def test_stream_messages_become_stdout_and_stderr_with_a_zoned_timestamp() -> None:
    out = event_for("stream", {"name": "stdout", "text": "hi\n"})
    err = event_for("stream", {"name": "stderr", "text": "oops\n"})
    assert out is not None and err is not None
    assert (out["type"], out["text"]) == ("stdout", "hi\n")
    assert (err["type"], err["text"]) == ("stderr", "oops\n")
    assert datetime.fromisoformat(out["timestamp"]).tzinfo is not None


def test_execute_result_is_the_main_result_and_maps_every_known_mime_type() -> None:
    bundle = {
        "text/plain": "'quoted'",
        "text/html": "<b>x</b>",
        "text/markdown": "*x*",
        "image/svg+xml": "<svg/>",
        "image/png": "iVBOR",
        "image/jpeg": "/9j/",
        "application/pdf": "JVBER",
        "text/latex": "$x$",
        "application/json": {"a": 1},
        "application/javascript": "1;",
        "application/vnd.custom+json": {"b": 2},
    }
    event = event_for("execute_result", {"data": bundle, "execution_count": 3})
    assert event == {
        "type": "result",
        "is_main_result": True,
        "text": "quoted",
        "html": "<b>x</b>",
        "markdown": "*x*",
        "svg": "<svg/>",
        "png": "iVBOR",
        "jpeg": "/9j/",
        "pdf": "JVBER",
        "latex": "$x$",
        "json": {"a": 1},
        "javascript": "1;",
        "extra": {"application/vnd.custom+json": {"b": 2}},
    }


def test_display_data_is_not_the_main_result() -> None:
    event = result_event({"text/plain": "<Figure>"}, is_main_result=False)
    assert event["is_main_result"] is False
    assert event["extra"] == {}


def test_errors_join_the_traceback_and_execute_input_counts() -> None:
    error = event_for(
        "error",
        {"ename": "NameError", "evalue": "name 'x' is not defined", "traceback": ["a", "b"]},
    )
    assert error == {
        "type": "error",
        "name": "NameError",
        "value": "name 'x' is not defined",
        "traceback": "a\nb",
    }
    assert event_for("execute_input", {"execution_count": 7, "code": "1"}) == {
        "type": "number_of_executions",
        "execution_count": 7,
    }
    assert event_for("status", {"execution_state": "busy"}) is None
