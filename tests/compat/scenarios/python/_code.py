"""Helpers for the code-interpreter scenarios: executions as plain JSON."""

from __future__ import annotations

from typing import Any

RESULT_KEYS = (
    "text",
    "html",
    "markdown",
    "svg",
    "png",
    "jpeg",
    "pdf",
    "latex",
    "json",
    "javascript",
    "data",
    "is_main_result",
    "extra",
)


def result_dict(result: Any) -> dict[str, Any]:
    out = {key: getattr(result, key, None) for key in RESULT_KEYS}
    chart = getattr(result, "chart", None)
    out["chart"] = chart.to_dict() if chart is not None else None
    out["chart_class"] = type(chart).__name__ if chart is not None else None
    return out


def error_dict(error: Any) -> dict[str, Any] | None:
    if error is None:
        return None
    return {"name": error.name, "value": error.value, "traceback": error.traceback}


def execution_dict(execution: Any) -> dict[str, Any]:
    return {
        "text": execution.text,
        "stdout": list(execution.logs.stdout),
        "stderr": list(execution.logs.stderr),
        "results": [result_dict(r) for r in execution.results],
        "error": error_dict(execution.error),
        "execution_count": execution.execution_count,
    }
