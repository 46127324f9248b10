"""OpenAI chat completions, and every server that speaks them (Ollama, vLLM, DeepSeek…)."""

from __future__ import annotations

import json
import os
from typing import Any

import openai

from sandgate.agents.providers.base import (
    Message,
    ModelReply,
    ModelRequest,
    ProviderError,
    ToolCall,
    plain_status,
)

__all__ = ["OpenAIProvider"]


class OpenAIProvider:
    """``base_url`` empty: ``OPENAI_BASE_URL`` or the SDK's default; ``api_key`` None:
    ``OPENAI_API_KEY`` (a local server that wants no key gets a placeholder)."""

    def __init__(self, *, base_url: str, api_key: str | None, timeout_s: float) -> None:
        key = api_key or os.environ.get("OPENAI_API_KEY") or "not-needed"
        self._client = openai.AsyncOpenAI(
            api_key=key, base_url=base_url or None, timeout=timeout_s, max_retries=0
        )

    async def complete(self, request: ModelRequest) -> ModelReply:
        params: dict[str, Any] = {
            "model": request.model,
            "messages": [{"role": "system", "content": request.system}]
            + [_message(m) for m in request.messages],
            "max_tokens": request.max_tokens,
        }
        if request.temperature is not None:
            params["temperature"] = request.temperature
        if request.tools:
            params["tools"] = [
                {
                    "type": "function",
                    "function": {
                        "name": t.name,
                        "description": t.description,
                        "parameters": t.parameters,
                    },
                }
                for t in request.tools
            ]
        try:
            response = await self._client.chat.completions.create(**params)
        except openai.APIStatusError as exc:
            raise ProviderError(
                plain_status(exc.status_code, _detail(exc)),
                status=exc.status_code,
                retryable=exc.status_code == 429 or exc.status_code >= 500,
            ) from None
        except openai.APIConnectionError as exc:
            raise ProviderError(plain_status(None, str(exc)), status=None, retryable=True) from None
        if not response.choices:
            raise ProviderError("the model returned no choices", status=None, retryable=True)
        choice = response.choices[0].message
        calls = tuple(
            ToolCall(c.id, c.function.name, _arguments(c.function.arguments))
            for c in (choice.tool_calls or [])
            if c.type == "function"
        )
        usage = response.usage
        return ModelReply(
            text=choice.content or "",
            prompt_tokens=usage.prompt_tokens if usage else 0,
            completion_tokens=usage.completion_tokens if usage else 0,
            model=response.model or request.model,
            tool_calls=calls,
        )

    async def close(self) -> None:
        await self._client.close()


def _message(message: Message) -> dict[str, Any]:
    if message.role == "tool":
        return {"role": "tool", "tool_call_id": message.tool_call_id, "content": message.content}
    data: dict[str, Any] = {"role": message.role, "content": message.content}
    if message.tool_calls:
        data["tool_calls"] = [
            {
                "id": c.id,
                "type": "function",
                "function": {"name": c.name, "arguments": json.dumps(c.arguments)},
            }
            for c in message.tool_calls
        ]
    return data


def _arguments(text: str) -> dict[str, Any]:
    try:
        value = json.loads(text or "{}")
    except ValueError:
        return {"_unparsed": text}
    return value if isinstance(value, dict) else {"_value": value}


def _detail(exc: openai.APIStatusError) -> str:
    body = exc.body
    if isinstance(body, dict):
        error = body.get("error", body)
        if isinstance(error, dict) and "message" in error:
            return str(error["message"])
    return exc.message
