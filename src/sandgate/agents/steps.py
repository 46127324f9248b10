"""What a run is made of: steps and events, as plain data.

Each step is a dataclass; ``event()`` turns it into the one ``RunEvent`` that the trace
(store), the SSE stream, the chat window and the audit log all consume. Nothing else
describes what happened in a run.

Events (``RunEvent.type``)::

    run.started        {run, session, agent, message}
    model.request      {step, model, messages}                        (trace only)
    model.fallback     {step, from, to, reason}     (a fallback model took over)
    text.delta         {step, text, model, prompt_tokens, completion_tokens, attempts}
    code.started       {step, language, code}
    code.completed     {step, language, exit_code, stdout, stderr, duration_ms, ...}
    tool.started       {step, tool, arguments}                        (classic mode)
    tool.completed     {step, tool, action, outcome, rule, audit_seq, duration_ms}
    approval.required  {step, approval, tool, action, arguments}
    run.completed      {run, answer, stop_reason, usage}
    run.failed         {run, state, stop_reason, error, usage}  (also stopped, cancelled)
"""

from __future__ import annotations

import enum
from dataclasses import asdict, dataclass, field
from typing import Any

from sandgate.agents.providers import Attempt, ToolCall
from sandgate.errors import Conflict

__all__ = [
    "PUBLIC_EVENTS",
    "CodeStep",
    "ModelStep",
    "RunEvent",
    "RunState",
    "ToolStep",
    "Usage",
    "check_run_transition",
]

#: Events the SSE stream sends (the rest stay in the trace).
PUBLIC_EVENTS = frozenset(
    {
        "run.started",
        "model.fallback",
        "text.delta",
        "code.started",
        "code.completed",
        "tool.started",
        "tool.completed",
        "approval.required",
        "run.completed",
        "run.failed",
    }
)
FINAL_EVENTS = frozenset({"run.completed", "run.failed"})


class RunState(enum.StrEnum):
    QUEUED = "queued"  #: accepted; holds its session
    RUNNING = "running"  #: the loop is working
    COMPLETED = "completed"  #: final: the model gave an answer
    STOPPED = "stopped"  #: final: a budget or stop check ended it without an answer
    FAILED = "failed"  #: final: no model answered, the sandbox failed, or the gateway restarted
    CANCELLED = "cancelled"  #: final: someone cancelled it (API or CLI)


_TRANSITIONS = {
    RunState.QUEUED: {RunState.RUNNING, RunState.FAILED, RunState.CANCELLED},
    RunState.RUNNING: {RunState.COMPLETED, RunState.STOPPED, RunState.FAILED, RunState.CANCELLED},
}


def check_run_transition(run_id: str, current: RunState, target: RunState) -> None:
    if target not in _TRANSITIONS.get(current, set()):
        raise Conflict(f"cannot move run {run_id} to {target.value}: it is {current.value}")


@dataclass(frozen=True)
class RunEvent:
    seq: int
    type: str
    data: dict[str, Any]

    def as_dict(self) -> dict[str, Any]:
        return {"seq": self.seq, "type": self.type, "data": self.data}


@dataclass
class Usage:
    model_calls: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    tool_calls: int = 0

    @property
    def tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens


@dataclass
class ModelStep:
    """One model round trip (after retries and fallbacks)."""

    number: int
    model: str = ""
    text: str = ""
    tool_calls: tuple[ToolCall, ...] = ()
    prompt_tokens: int = 0
    completion_tokens: int = 0
    duration_ms: float = 0.0
    attempts: list[Attempt] = field(default_factory=list)

    def event(self) -> tuple[str, dict[str, Any]]:
        return "text.delta", {
            "step": self.number,
            "text": self.text,
            "model": self.model,
            "tool_calls": [asdict(c) for c in self.tool_calls],
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": self.completion_tokens,
            "duration_ms": self.duration_ms,
            "attempts": [asdict(a) for a in self.attempts],
        }


@dataclass
class CodeStep:
    """One program run in the sandbox."""

    number: int
    language: str
    code: str
    exit_code: int | None = None
    stdout: str = ""
    stderr: str = ""
    stdout_bytes: int = 0
    stderr_bytes: int = 0
    duration_ms: float = 0.0
    timed_out: bool = False
    notes: list[str] = field(default_factory=list)

    def started(self) -> tuple[str, dict[str, Any]]:
        return "code.started", {"step": self.number, "language": self.language, "code": self.code}

    def event(self) -> tuple[str, dict[str, Any]]:
        data = asdict(self)
        data["step"] = data.pop("number")
        del data["code"]
        return "code.completed", data


@dataclass
class ToolStep:
    """One tool call as the gateway's audit index recorded it (or, in classic mode, as the
    runner made it)."""

    number: int
    tool: str
    action: str | None
    outcome: str
    rule: str | None
    audit_seq: int | None
    duration_ms: float | None
    arguments: dict[str, Any] | None = None
    result: Any = None
    error: str | None = None

    def started(self) -> tuple[str, dict[str, Any]]:
        return "tool.started", {"step": self.number, "tool": self.tool, "arguments": self.arguments}

    def event(self) -> tuple[str, dict[str, Any]]:
        data = asdict(self)
        data["step"] = data.pop("number")
        return "tool.completed", data
