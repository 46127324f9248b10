"""A tool as the gateway holds it: its contract (schema, limits, risk) and its executor."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from sandgate.policy import Subject

__all__ = ["Executor", "RetryPolicy", "Tool", "ToolContext"]


@dataclass(frozen=True)
class ToolContext:
    """What an execution may know besides its arguments.

    ``secrets`` holds only the secrets this tool declares; it is the one place their values
    exist during a call.
    """

    tool: str
    subject: Subject
    secrets: dict[str, str]
    home: Path
    timeout_s: float
    output_limit: int


class Executor(Protocol):
    """Runs one validated, allowed call. Raises ``ToolFailed``/``ToolTimeout`` (or
    ``InvalidArguments``); returns a JSON-compatible value. Cancellation must stop the work
    (kill processes, close connections)."""

    async def run(self, arguments: dict[str, Any], context: ToolContext) -> Any: ...


@dataclass(frozen=True)
class RetryPolicy:
    """How often a failed call of an idempotent tool is tried again (``tools.retry``)."""

    attempts: int
    backoff_s: float
    max_backoff_s: float

    def delay(self, attempt: int) -> float:
        """Seconds to wait before attempt ``attempt`` (2, 3, ...)."""
        return float(min(self.max_backoff_s, self.backoff_s * 2 ** (attempt - 2)))


@dataclass(frozen=True)
class Tool:
    name: str
    description: str
    parameters: dict[str, Any]
    kind: str
    executor: Executor = field(repr=False, compare=False)
    action: str | None = None
    timeout_s: float = 30.0
    output_limit: int = 64 * 1024
    risk: str = "low"
    secrets: tuple[str, ...] = ()
    idempotent: bool = True
    retry: RetryPolicy | None = None
    #: ``full``, ``fields`` or ``none``: what of the result the caller gets.
    output_mode: str = "full"
    output_fields: tuple[str, ...] = ()

    @property
    def actions(self) -> list[str]:
        """The values of the action parameter's enum (empty when there is none)."""
        if self.action is None:
            return []
        prop = self.parameters.get("properties", {}).get(self.action, {})
        return [str(v) for v in prop.get("enum", [])]

    def describe(self) -> dict[str, Any]:
        """The public view (API, stubs, ``tools list``): no executor details."""
        return {
            "name": self.name,
            "description": self.description,
            "parameters": self.parameters,
            "kind": self.kind,
            "action": self.action,
            "actions": self.actions,
            "risk": self.risk,
            "timeout_s": self.timeout_s,
            "output_limit": self.output_limit,
            "idempotent": self.idempotent,
            "retry_attempts": self.retry.attempts if self.retry else 1,
            "output": self.output_mode,
        }
