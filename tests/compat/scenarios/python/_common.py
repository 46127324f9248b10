"""Shared helpers for the Python scenario scripts (runs inside a pinned client's venv).

Only the standard library and the pinned SDK are available here; nothing from Sandgate.
"""

from __future__ import annotations

import json
import sys
import time
import traceback
from collections.abc import Callable
from datetime import datetime
from importlib.metadata import PackageNotFoundError, version
from typing import Any

MAX_PAGES = 50


def sdk_versions(extra: tuple[str, ...] = ()) -> dict[str, str | None]:
    """Installed versions of the SDK packages and of ``extra`` ones (None: not installed)."""
    found: dict[str, str | None] = {}
    for package in ("e2b", "e2b-code-interpreter", *extra):
        try:
            found[package] = version(package)
        except PackageNotFoundError:
            found[package] = None
    return found


def describe_error(exc: BaseException) -> dict[str, Any]:
    """Class name, its ancestors' names, the message and the SDK-specific attributes."""
    described: dict[str, Any] = {
        "class": type(exc).__name__,
        "classes": [cls.__name__ for cls in type(exc).__mro__],
        "message": str(exc),
    }
    for attr in ("exit_code", "stdout", "stderr", "error"):
        if hasattr(exc, attr):
            described[attr] = getattr(exc, attr)
    return described


def attempt(action: Callable[[], Any]) -> dict[str, Any]:
    """Runs ``action``: ``{"ok": True, "value": ...}`` or ``{"ok": False, "error": {...}}``."""
    try:
        return {"ok": True, "value": action()}
    except Exception as exc:
        return {"ok": False, "error": describe_error(exc)}


def command_result(result: Any) -> dict[str, Any]:
    return {
        "stdout": result.stdout,
        "stderr": result.stderr,
        "exit_code": result.exit_code,
        "error": result.error,
    }


def info_dict(info: Any) -> dict[str, Any]:
    return {
        "sandbox_id": info.sandbox_id,
        "template_id": info.template_id,
        "name": info.name,
        "metadata": dict(info.metadata or {}),
        "started_at": iso(info.started_at),
        "end_at": iso(info.end_at),
        "state": str(getattr(info.state, "value", info.state)),
        "cpu_count": info.cpu_count,
        "memory_mb": info.memory_mb,
        "envd_version": info.envd_version,
    }


def iso(moment: datetime | None) -> str | None:
    return moment.isoformat() if moment is not None else None


def list_all(sandbox_cls: Any, **kwargs: Any) -> list[Any]:
    """Every page of ``Sandbox.list(**kwargs)``; stops after ``MAX_PAGES`` pages."""
    paginator = sandbox_cls.list(**kwargs)
    items: list[Any] = []
    for _ in range(MAX_PAGES):
        if not paginator.has_next:
            break
        items.extend(paginator.next_items())
    return items


def now() -> float:
    return time.time()


def run(main: Callable[[list[str]], dict[str, Any]], packages: tuple[str, ...] = ()) -> None:
    """Runs a scenario and prints its JSON result as the last line of stdout.

    ``versions`` in the result names the SDK packages and ``packages`` (an agent framework's
    own distributions). An unexpected exception prints its traceback on stderr and exits with
    status 1.
    """
    try:
        result = main(sys.argv[1:])
    except Exception:
        traceback.print_exc()
        sys.exit(1)
    result["versions"] = sdk_versions(packages)
    print(json.dumps(result, default=str), flush=True)
