"""Chat channels that reach agents from outside the API: Telegram (``sandgate.channels``).

The bot token is never written in the file: it comes from an environment variable
(``token_env``) or a declared secret (``token_secret``), like a model provider's key. Who may
talk to the bot (``allowed_users``) and who may decide an agent's approvals (``approvers``)
are Telegram user ids, which Telegram vouches for; user names can change hands and are not
used for access.
"""

from __future__ import annotations

from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

__all__ = ["ChannelsConfig", "TelegramChat", "TelegramConfig", "check_channel_references"]


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class TelegramChat(_Section):
    """One chat (a private chat's id is its user's id; groups are negative) and its agent."""

    id: int
    agent: str


class TelegramConfig(_Section):
    """A Telegram bot served by ``sandgate serve`` (long polling; no public URL needed)."""

    #: Environment variable holding the bot token from @BotFather (used unless
    #: ``token_secret`` is set).
    token_env: str = "TELEGRAM_BOT_TOKEN"  # noqa: S105 (a variable's name, not a token)
    #: A secret (``secrets:``) holding the bot token; preferred over ``token_env``.
    token_secret: str | None = None
    #: The Bot API's base URL: Telegram's, or a local Bot API server or proxy.
    api_url: str = "https://api.telegram.org"
    #: The team whose sessions, runs and sandboxes the bot's conversations are.
    team: str = "default"
    #: The agent that answers chats not listed in ``chats``.
    agent: str
    #: Chats answered by another agent than ``agent``.
    chats: list[TelegramChat] = Field(default_factory=list)
    #: Telegram user ids that may talk to the bot; everyone else is refused (and logged).
    allowed_users: list[int] = Field(min_length=1)
    #: Per agent id: the Telegram user ids whose button press decides that agent's approvals.
    #: An agent with none listed gets its approvals shown without buttons (decide them with
    #: ``sandgate approvals`` or the API).
    approvers: dict[str, list[int]] = Field(default_factory=dict)
    #: Seconds one ``getUpdates`` long poll waits for news.
    poll_timeout_s: int = Field(30, ge=0, le=50)
    #: Longest wait between two attempts while Telegram is unreachable or refuses the token.
    max_backoff_s: float = Field(300.0, ge=1)

    @field_validator("api_url")
    @classmethod
    def _api_url(cls, value: str) -> str:
        parts = urlsplit(value)
        if parts.scheme not in ("https", "http") or not parts.hostname or parts.query:
            raise ValueError(f"api_url {value!r} must be an https:// (or http://) URL with a host")
        return value.rstrip("/")

    @model_validator(mode="after")
    def _unique_chats(self) -> TelegramConfig:
        ids = [chat.id for chat in self.chats]
        if len(ids) != len(set(ids)):
            raise ValueError("chats lists a chat id twice")
        return self

    def agent_for(self, chat_id: int) -> str:
        """The agent that answers ``chat_id``."""
        return next((c.agent for c in self.chats if c.id == chat_id), self.agent)


class ChannelsConfig(_Section):
    """Chat channels; each is off until configured."""

    telegram: TelegramConfig | None = None


def check_channel_references(channels: ChannelsConfig, agents: set[str], secrets: set[str]) -> None:
    """Raises ``ValueError`` when a channel names an undeclared agent or secret."""
    telegram = channels.telegram
    if telegram is None:
        return
    named = {telegram.agent, *(c.agent for c in telegram.chats), *telegram.approvers}
    unknown = sorted(named - agents)
    if unknown:
        raise ValueError(f"channels.telegram names undeclared agents: {', '.join(unknown)}")
    if telegram.token_secret is not None and telegram.token_secret not in secrets:
        raise ValueError(
            f"channels.telegram.token_secret '{telegram.token_secret}' is not declared in secrets:"
        )
