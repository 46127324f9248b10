"""The seam between the agent loop and a model API: one method, ``complete``.

A provider turns a ``ModelRequest`` into one ``ModelReply`` with the provider's own token
counts, or raises ``ProviderError`` saying whether trying again could help. Retries, fallbacks
and cooldowns are not a provider's business (``providers.router``); each provider module
only translates between our records and its official SDK.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

__all__ = [
    "Message",
    "ModelReply",
    "ModelRequest",
    "Provider",
    "ProviderError",
    "ToolCall",
    "ToolSpec",
]


@dataclass(frozen=True)
class ToolCall:
    """A native tool call the model asked for (classic mode)."""

    id: str
    name: str
    arguments: dict[str, Any]


@dataclass(frozen=True)
class Message:
    """One turn of the conversation, provider-neutral.

    ``tool`` messages answer the ``ToolCall`` with id ``tool_call_id``.
    """

    role: Literal["user", "assistant", "tool"]
    content: str
    tool_calls: tuple[ToolCall, ...] = ()
    tool_call_id: str | None = None

    def as_dict(self) -> dict[str, Any]:
        data: dict[str, Any] = {"role": self.role, "content": self.content}
        if self.tool_calls:
            data["tool_calls"] = [
                {"id": c.id, "name": c.name, "arguments": c.arguments} for c in self.tool_calls
            ]
        if self.tool_call_id is not None:
            data["tool_call_id"] = self.tool_call_id
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Message:
        return cls(
            role=data["role"],
            content=data.get("content", ""),
            tool_calls=tuple(
                ToolCall(c["id"], c["name"], dict(c.get("arguments") or {}))
                for c in data.get("tool_calls", [])
            ),
            tool_call_id=data.get("tool_call_id"),
        )


@dataclass(frozen=True)
class ToolSpec:
    name: str
    description: str
    parameters: dict[str, Any]


@dataclass(frozen=True)
class ModelRequest:
    model: str
    system: str
    messages: tuple[Message, ...]
    max_tokens: int
    temperature: float | None = None
    tools: tuple[ToolSpec, ...] = ()


@dataclass(frozen=True)
class ModelReply:
    text: str
    prompt_tokens: int
    completion_tokens: int
    model: str
    tool_calls: tuple[ToolCall, ...] = field(default=())


class ProviderError(Exception):
    """A model request failed. ``retryable``: a 429, a 5xx or a connection failure."""

    def __init__(self, message: str, *, status: int | None, retryable: bool) -> None:
        super().__init__(message)
        self.message = message
        self.status = status
        self.retryable = retryable


class Provider(Protocol):
    async def complete(self, request: ModelRequest) -> ModelReply:
        """Sends one request (no retries of its own); raises ``ProviderError``.
        Cancellation abandons the HTTP request."""
        ...

    async def close(self) -> None: ...


def plain_status(status: int | None, detail: str) -> str:
    """A sentence a user can act on, for an HTTP status from a model API."""
    hints = {
        401: "the API key was refused: check the provider's key",
        403: "the API key may not use this model",
        404: "the model or endpoint does not exist: check the model name and base_url",
        429: "rate limited or out of quota",
    }
    if status is None:
        return f"could not reach the model API ({detail})"
    hint = hints.get(status, "the model API failed" if status >= 500 else "request rejected")
    return f"{hint} (HTTP {status}: {detail[:300]})"
