"""Choosing a model: the agent's models in order, retries with backoff, shared cooldowns.

For each model in the agent's list (``model`` then ``fallbacks``): skip it while it is cooling
down; otherwise try it, retrying a retryable failure (429, 5xx, connection) ``retries`` times
with exponential backoff; a model that still fails (or is rate limited) cools down for
``cooldown_s`` in a ``Cooldowns`` book that every session of this process shares, and the
next model is tried. A non-retryable failure (bad key, unknown model) moves on at once. When
every model failed, ``ModelUnavailable`` lists what happened to each, in plain words.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass

from sandgate.agents.providers.base import ModelReply, ModelRequest, Provider, ProviderError
from sandgate.config import ModelChoice, ProviderConfig
from sandgate.errors import ModelUnavailable

__all__ = ["Attempt", "Cooldowns", "ModelRouter"]


class Cooldowns:
    """(provider, model) pairs to skip until a monotonic deadline; process-wide."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._until: dict[tuple[str, str], float] = {}
        self._clock = clock

    def cooling(self, key: tuple[str, str]) -> float:
        """Seconds left, or 0."""
        return max(0.0, self._until.get(key, 0.0) - self._clock())

    def cool(self, key: tuple[str, str], seconds: float) -> None:
        self._until[key] = self._clock() + seconds


@dataclass(frozen=True)
class Attempt:
    """One request to one model, as the trace records it."""

    provider: str
    model: str
    ok: bool
    error: str = ""
    status: int | None = None
    duration_ms: float = 0.0


class ModelRouter:
    def __init__(
        self,
        providers: dict[str, Provider],
        settings: dict[str, ProviderConfig],
        cooldowns: Cooldowns,
    ) -> None:
        self._providers = providers
        self._settings = settings
        self._cooldowns = cooldowns

    async def complete(
        self,
        models: list[ModelChoice],
        request: ModelRequest,
        attempts: list[Attempt],
        on_fallback: Callable[[ModelChoice, ModelChoice, str], None] | None = None,
    ) -> tuple[ModelChoice, ModelReply]:
        """The first successful reply and the model that gave it; every try is appended to
        ``attempts``. ``on_fallback(from, to, reason)`` is told, as it happens, each time a
        model is given up and the next one is tried. Raises ``ModelUnavailable`` when no model
        answered."""
        problems: list[str] = []
        previous: ModelChoice | None = None
        for choice in models:
            key = (choice.provider, choice.model)
            if previous is not None and on_fallback is not None:
                on_fallback(previous, choice, problems[-1] if problems else "")
            previous = choice
            left = self._cooldowns.cooling(key)
            if left > 0:
                problems.append(f"{choice.provider}/{choice.model}: cooling down ({left:.0f}s)")
                continue
            settings = self._settings[choice.provider]
            provider = self._providers[choice.provider]
            for retry in range(settings.retries + 1):
                started = time.monotonic()
                try:
                    reply = await provider.complete(_for(request, choice.model))
                except ProviderError as exc:
                    attempts.append(
                        Attempt(
                            choice.provider,
                            choice.model,
                            False,
                            exc.message,
                            exc.status,
                            _ms(started),
                        )
                    )
                    last = exc
                    if not exc.retryable or retry == settings.retries:
                        break
                    await asyncio.sleep(settings.backoff_s * (2**retry))
                    continue
                attempts.append(Attempt(choice.provider, choice.model, True, "", 200, _ms(started)))
                return choice, reply
            problems.append(f"{choice.provider}/{choice.model}: {last.message}")
            if last.retryable or last.status == 429:
                self._cooldowns.cool(key, settings.cooldown_s)
        raise ModelUnavailable("no model answered. " + "; ".join(problems))


def _for(request: ModelRequest, model: str) -> ModelRequest:
    return ModelRequest(
        model=model,
        system=request.system,
        messages=request.messages,
        max_tokens=request.max_tokens,
        temperature=request.temperature,
        tools=request.tools,
    )


def _ms(started: float) -> float:
    return round((time.monotonic() - started) * 1000, 3)
