"""Anthropic messages API."""

from __future__ import annotations

import os
from typing import Any

import anthropic

from sandgate.agents.providers.base import (
    Message,
    ModelReply,
    ModelRequest,
    ProviderError,
    ToolCall,
    plain_status,
)

__all__ = ["AnthropicProvider"]


class AnthropicProvider:
    """``base_url`` empty: ``ANTHROPIC_BASE_URL`` or the SDK's default; ``api_key`` None:
    ``ANTHROPIC_API_KEY``."""

    def __init__(self, *, base_url: str, api_key: str | None, timeout_s: float) -> None:
        key = api_key or os.environ.get("ANTHROPIC_API_KEY") or "not-set"
        self._client = anthropic.AsyncAnthropic(
            api_key=key, base_url=base_url or None, timeout=timeout_s, max_retries=0
        )

    async def complete(self, request: ModelRequest) -> ModelReply:
        params: dict[str, Any] = {
            "model": request.model,
            "system": request.system,
            "messages": _messages(request.messages),
            "max_tokens": request.max_tokens,
        }
        if request.temperature is not None:
            params["temperature"] = request.temperature
        if request.tools:
            params["tools"] = [
                {"name": t.name, "description": t.description, "input_schema": t.parameters}
                for t in request.tools
            ]
        try:
            response = await self._client.messages.create(**params)
        except anthropic.APIStatusError as exc:
            raise ProviderError(
                plain_status(exc.status_code, exc.message),
                status=exc.status_code,
                retryable=exc.status_code in (429, 529) or exc.status_code >= 500,
            ) from None
        except anthropic.APIConnectionError as exc:
            raise ProviderError(plain_status(None, str(exc)), status=None, retryable=True) from None
        text = "".join(getattr(b, "text", "") for b in response.content if b.type == "text")
        calls = tuple(
            ToolCall(b.id, b.name, dict(b.input) if isinstance(b.input, dict) else {})
            for b in response.content
            if b.type == "tool_use"
        )
        return ModelReply(
            text=text,
            prompt_tokens=response.usage.input_tokens,
            completion_tokens=response.usage.output_tokens,
            model=response.model or request.model,
            tool_calls=calls,
        )

    async def close(self) -> None:
        await self._client.close()


def _messages(messages: tuple[Message, ...]) -> list[dict[str, Any]]:
    """Anthropic wants tool results as user turns and strict user/assistant alternation."""
    out: list[dict[str, Any]] = []
    for message in messages:
        if message.role == "tool":
            block: Any = {
                "type": "tool_result",
                "tool_use_id": message.tool_call_id,
                "content": message.content,
            }
            role = "user"
        elif message.tool_calls:
            block = [{"type": "text", "text": message.content}] if message.content else []
            block += [
                {"type": "tool_use", "id": c.id, "name": c.name, "input": c.arguments}
                for c in message.tool_calls
            ]
            role = "assistant"
        else:
            block = {"type": "text", "text": message.content or "(empty)"}
            role = message.role
        blocks = block if isinstance(block, list) else [block]
        if out and out[-1]["role"] == role:
            out[-1]["content"].extend(blocks)
        else:
            out.append({"role": role, "content": list(blocks)})
    return out
