"""Configuration of the agent runner: agents, model providers and skills.

``AgentConfig`` extends the gateway's minimal agent (id, metadata, teams: what the policy
needs to know about a subject) with what the runner needs: model and fallbacks, prompt,
tools, skills, autonomy, budgets and sandbox. Every new field has a default, so a config
written for the gateway alone still loads unchanged.

Providers are named: ``openai`` and ``anthropic`` exist without configuration (reading the
standard ``OPENAI_BASE_URL``/``OPENAI_API_KEY`` and ``ANTHROPIC_BASE_URL``/``ANTHROPIC_API_KEY``
variables); any OpenAI-compatible server (Ollama, vLLM, DeepSeek, …) is one more entry with
``kind: openai`` and a ``base_url``.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from sandgate.config._gateway import AgentConfig as _PolicyAgent

_ENV_DEFAULT = re.compile(r"\$\{([A-Z_][A-Z0-9_]*)(?::-([^}]*))?\}")
Autonomy = Literal["suggest", "semi", "auto"]
Language = Literal["python", "javascript", "typescript", "bash"]


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class ModelChoice(_Section):
    """One model to try: ``provider`` names an entry of ``providers:`` (or a built-in)."""

    provider: str = "openai"
    model: str = Field(min_length=1)


class AgentBudgets(_Section):
    """Limits of one run; reaching one stops the run with that limit named."""

    max_steps: int = Field(10, ge=1, le=1000)
    #: Prompt + completion tokens over the whole run, as the provider counted them.
    max_tokens: int = Field(200_000, ge=1)
    max_wall_clock_s: float = Field(600.0, gt=0)
    #: Tool calls made through the gateway during the run (code mode counts every call the
    #: script makes). Enforced when a call is made: the next one is refused with
    #: ``budget_exceeded`` and the run stops with that reason.
    max_tool_calls: int = Field(500, ge=1)


class AgentSandbox(_Section):
    template: str = "base"
    #: Seconds the session's sandbox lives after its last run began.
    timeout_s: int = Field(3600, ge=60)
    cpu_count: int | None = Field(None, ge=1)
    memory_mb: int | None = Field(None, ge=64)
    #: Longest a single code execution may run before it is interrupted.
    code_timeout_s: float = Field(120.0, gt=0)
    #: Characters of stdout and of stderr returned to the model (the tail is kept).
    output_limit: int = Field(4000, ge=200, le=1_000_000)


class AgentConfig(_PolicyAgent):
    """An agent: the gateway's subject plus how the runner drives it."""

    name: str = ""
    provider: str = "openai"
    model: str = "gpt-4o-mini"
    #: Tried in order when the model above is rate limited, failing or cooling down.
    fallbacks: list[ModelChoice] = Field(default_factory=list)
    #: Added to the generated system prompt (tool API, skills, sandbox rules).
    system_prompt: str = ""
    #: Tool name globs: the only tools this agent may call at all (stubs, gateway socket, MCP
    #: endpoint, prompt); a hard limit no policy rule widens. The policy decides each call.
    tools: list[str] = Field(default_factory=lambda: ["*"], min_length=1)
    #: Names of skills (directories under ``skills.paths``) offered to this agent.
    skills: list[str] = Field(default_factory=list)
    temperature: float | None = Field(None, ge=0, le=2)
    #: Most tokens in one model response.
    max_tokens: int = Field(2048, ge=1)
    #: ``suggest``: every tool call needs a person's approval; ``semi``: high-risk calls do;
    #: ``auto``: the policy alone decides.
    autonomy: Autonomy = "auto"
    #: ``code``: the model writes programs; ``classic``: one native tool call per turn.
    mode: Literal["code", "classic"] = "code"
    #: The language the prompt asks for; the model may still use any of ``Language``.
    language: Language = "python"
    budgets: AgentBudgets = AgentBudgets()
    sandbox: AgentSandbox = AgentSandbox()

    @field_validator("provider", "model")
    @classmethod
    def _environment(cls, value: str) -> str:
        """``${VAR}`` or ``${VAR:-default}`` is replaced from the gateway's environment, so
        one config file can name the model per deployment."""
        return _ENV_DEFAULT.sub(lambda m: os.environ.get(m.group(1)) or m.group(2) or "", value)

    @property
    def models(self) -> list[ModelChoice]:
        return [ModelChoice(provider=self.provider, model=self.model), *self.fallbacks]


class ProviderConfig(_Section):
    """A model provider reached through its official SDK."""

    kind: Literal["openai", "anthropic"]
    #: Empty: the SDK's default (or ``OPENAI_BASE_URL``/``ANTHROPIC_BASE_URL``).
    base_url: str = ""
    #: A secret (``secrets:``) holding the API key; else ``api_key_env``; else the SDK default
    #: variable. Servers that need no key (Ollama) accept any value.
    api_key_secret: str | None = None
    api_key_env: str | None = None
    #: Attempts per model before moving to the next (429 and 5xx only).
    retries: int = Field(2, ge=0, le=10)
    backoff_s: float = Field(1.0, ge=0)
    #: How long a model that kept failing is skipped, across all sessions.
    cooldown_s: float = Field(60.0, ge=0)
    timeout_s: float = Field(120.0, gt=0)


BUILTIN_PROVIDERS: dict[str, ProviderConfig] = {
    "openai": ProviderConfig(kind="openai"),
    "anthropic": ProviderConfig(kind="anthropic"),
}


class SkillsConfig(_Section):
    #: Directories holding one sub-directory per skill (each with a ``SKILL.md``).
    paths: list[Path] = Field(default_factory=list)


def check_agent_references(
    agents: list[AgentConfig], providers: dict[str, ProviderConfig], secrets: set[str]
) -> None:
    """Unique agent ids; every provider an agent names exists; key secrets are declared."""
    known = {**BUILTIN_PROVIDERS, **providers}
    seen: set[str] = set()
    for agent in agents:
        if agent.id in seen:
            raise ValueError(f"agent id '{agent.id}' is declared twice")
        seen.add(agent.id)
        for choice in agent.models:
            if choice.provider not in known:
                raise ValueError(
                    f"agent '{agent.id}' uses provider '{choice.provider}', which is neither "
                    f"built in (openai, anthropic) nor declared in providers"
                )
    for name, provider in providers.items():
        if provider.api_key_secret is not None and provider.api_key_secret not in secrets:
            raise ValueError(f"provider '{name}' needs secret '{provider.api_key_secret}'")
