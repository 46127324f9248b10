"""What the pages show, computed from service records: ages, a run's trace as cards, a
workflow's steps grouped by depth. Pure functions, so they are tested without a browser."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from sandgate.errors import InvalidRequest
from sandgate.store import WorkflowStepRecord

__all__ = [
    "TraceCard",
    "age",
    "clock",
    "dag_levels",
    "describe_event",
    "filesize",
    "parse_time",
    "remaining",
]


def age(when: datetime | None) -> str:
    """``when`` as a short age: ``42s``, ``5m``, ``3h``, ``2d``."""
    if when is None:
        return "-"
    seconds = max(0, int((datetime.now(UTC) - when).total_seconds()))
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{seconds // size}{unit}"
    return f"{seconds}s"


def filesize(count: int) -> str:
    """Bytes as a short size: ``812 B``, ``4.0 KiB``, ``1.5 MiB``, ``2.0 GiB``."""
    size = float(count)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if size < 1024 or unit == "GiB":
            return f"{int(size)} B" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return f"{size:.1f} GiB"  # pragma: no cover - the loop returns


def clock(seconds: float) -> str:
    """A unix time as ``2026-12-01 10:00:00`` (UTC)."""
    return datetime.fromtimestamp(seconds, UTC).strftime("%Y-%m-%d %H:%M:%S")


def parse_time(name: str, value: str) -> datetime | None:
    """A form's time (``2026-12-01T10:00``, ISO 8601, zone optional: UTC); empty: None."""
    if not value:
        return None
    try:
        parsed = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        raise InvalidRequest(f"{name} must be a time such as 2026-12-01T10:00 (UTC)") from None
    return (parsed if parsed.tzinfo is not None else parsed.replace(tzinfo=UTC)).astimezone(UTC)


@dataclass(frozen=True)
class TraceCard:
    """One event of a run's trace as the run page draws it: a kind (``model``, ``code``,
    ``tool``, ``run`` or ``other``), a title, short facts, and blocks of text (code, output,
    arguments)."""

    kind: str
    title: str
    facts: list[tuple[str, str]] = field(default_factory=list)
    blocks: list[tuple[str, str]] = field(default_factory=list)


def _text(value: Any) -> str:
    if isinstance(value, str):
        return value
    import json

    return json.dumps(value, indent=2, sort_keys=True, default=str)


def describe_event(kind: str, data: dict[str, Any]) -> TraceCard:
    """A stored run event (``agents.steps``) as a card; unknown kinds show their data."""
    step = data.get("step")
    prefix = f"step {step}: " if step is not None else ""
    if kind == "text.delta":
        facts = [
            ("model", str(data.get("model") or "-")),
            ("prompt tokens", str(data.get("prompt_tokens", 0))),
            ("completion tokens", str(data.get("completion_tokens", 0))),
            ("ms", f"{float(data.get('duration_ms') or 0):.0f}"),
        ]
        return TraceCard(
            "model", f"{prefix}model call", facts, [("reply", _text(data.get("text") or ""))]
        )
    if kind == "model.request":
        return TraceCard(
            "model", f"{prefix}model request", [("messages", str(data.get("messages")))]
        )
    if kind == "code.started":
        return TraceCard(
            "code",
            f"{prefix}code ({data.get('language', '?')})",
            [],
            [("code", _text(data.get("code", "")))],
        )
    if kind == "code.completed":
        facts = [
            ("exit code", str(data.get("exit_code"))),
            ("ms", f"{float(data.get('duration_ms') or 0):.0f}"),
        ]
        if data.get("timed_out"):
            facts.append(("timed out", "yes"))
        blocks = [(n, _text(data[n])) for n in ("stdout", "stderr") if data.get(n)]
        return TraceCard("code", f"{prefix}code finished", facts, blocks)
    if kind in ("tool.started", "tool.completed"):
        facts = [("tool", str(data.get("tool")))]
        if kind == "tool.completed":
            facts += [
                ("decision", str(data.get("outcome"))),
                ("rule", str(data.get("rule") or "-")),
                ("audit record", str(data.get("audit_seq") or "-")),
            ]
        blocks = [("arguments", _text(data["arguments"]))] if data.get("arguments") else []
        if data.get("error"):
            blocks.append(("error", _text(data["error"])))
        title = "tool call" if kind == "tool.started" else "tool call decided"
        return TraceCard("tool", f"{prefix}{title}", facts, blocks)
    if kind.startswith("run."):
        facts = [
            (k.replace("_", " "), str(data[k]))
            for k in ("stop_reason", "steps", "model_calls", "prompt_tokens", "completion_tokens")
            if k in data
        ]
        blocks = [(k, _text(data[k])) for k in ("answer", "error") if data.get(k)]
        return TraceCard("run", kind.removeprefix("run."), facts, blocks)
    return TraceCard("other", f"{prefix}{kind}", [], [("data", _text(data))] if data else [])


def dag_levels(steps: Sequence[WorkflowStepRecord]) -> list[list[WorkflowStepRecord]]:
    """A workflow's steps grouped by depth (a step's depth is one more than its deepest
    dependency's), each level in definition order: the DAG drawn as columns."""
    by_id = {s.step_id: s for s in steps}
    depth: dict[str, int] = {}

    def depth_of(step_id: str, seen: frozenset[str]) -> int:
        if step_id in depth:
            return depth[step_id]
        step = by_id.get(step_id)
        parents = [p for p in (step.depends_on if step else []) if p in by_id and p not in seen]
        value = 1 + max((depth_of(p, seen | {step_id}) for p in parents), default=-1)
        depth[step_id] = value
        return value

    levels: list[list[WorkflowStepRecord]] = []
    for step in sorted(steps, key=lambda s: s.position):
        level = depth_of(step.step_id, frozenset())
        while len(levels) <= level:
            levels.append([])
        levels[level].append(step)
    return levels


def remaining(when: datetime | None) -> str:
    """Time until ``when``: ``in 4m``, or ``due`` once past."""
    if when is None:
        return "-"
    seconds = int((when - datetime.now(UTC)).total_seconds())
    if seconds <= 0:
        return "due"
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"in {seconds // size}{unit}"
    return f"in {seconds}s"
