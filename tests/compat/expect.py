"""Assertions shared by the compatibility tests, phrased over the scenarios' JSON output.

Python SDKs name errors ``...Exception``, JS SDKs ``...Error``; :func:`error_kind` lets a test
name the kind once (``"NotFound"``) and accept the right class for either language.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from .clients import PreparedClient


def sdk_version(client: PreparedClient) -> str:
    """The pinned ``e2b`` version, from the client name (``py-e2b-2.31.0`` → ``2.31.0``)."""
    return client.name.rsplit("-", 1)[1]


def assert_sdk_version(result: dict[str, Any], client: PreparedClient) -> None:
    assert result["versions"]["e2b"] == sdk_version(client), result["versions"]


def error_class(client: PreparedClient, kind: str) -> str:
    return f"{kind}Exception" if client.lang == "python" else f"{kind}Error"


def failed_with(client: PreparedClient, outcome: dict[str, Any], kind: str) -> dict[str, Any]:
    """Asserts ``outcome`` (from ``attempt``) failed with ``kind`` or a subclass; returns the
    error description (``class``, ``classes``, ``message``, ...)."""
    assert outcome["ok"] is False, f"expected {kind} failure, got success: {outcome}"
    error = outcome["error"]
    expected = error_class(client, kind)
    assert expected in error["classes"], f"expected {expected}, got {error}"
    return error


def command_ok(result: dict[str, Any], stdout: str, stderr: str = "") -> None:
    assert result["exit_code"] == 0, result
    assert result["stdout"] == stdout, result
    assert result["stderr"] == stderr, result


def timestamp(value: str) -> float:
    """Seconds since the epoch of an ISO 8601 string with a zone (``Z`` or ``+00:00``)."""
    moment = datetime.fromisoformat(value)
    assert moment.tzinfo is not None, f"timestamp without a zone: {value}"
    return moment.timestamp()
