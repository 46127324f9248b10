"""Model providers (one module each) and the router that picks between them."""

from __future__ import annotations

from sandgate.agents.providers.base import (
    Message,
    ModelReply,
    ModelRequest,
    Provider,
    ProviderError,
    ToolCall,
    ToolSpec,
)
from sandgate.agents.providers.router import Attempt, Cooldowns, ModelRouter
from sandgate.config import ProviderConfig

__all__ = [
    "Attempt",
    "Cooldowns",
    "Message",
    "ModelReply",
    "ModelRequest",
    "ModelRouter",
    "Provider",
    "ProviderError",
    "ToolCall",
    "ToolSpec",
    "open_provider",
]


def open_provider(settings: ProviderConfig, api_key: str | None) -> Provider:
    """A provider client for ``settings`` (SDKs imported on first use: they are slow)."""
    if settings.kind == "anthropic":
        from sandgate.agents.providers.anthropic import AnthropicProvider

        return AnthropicProvider(
            base_url=settings.base_url, api_key=api_key, timeout_s=settings.timeout_s
        )
    from sandgate.agents.providers.openai import OpenAIProvider

    return OpenAIProvider(base_url=settings.base_url, api_key=api_key, timeout_s=settings.timeout_s)
