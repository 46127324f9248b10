"""Chat channels: agents reachable from outside the API, as a server's background work.

Today one channel, Telegram (``telegram.py``); ``_text.py`` holds what a chat shows of a run.
``build_channels`` returns the channels the configuration turns on; the server's lifespan
starts and stops them.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from sandgate.channels.telegram import TelegramChannel
    from sandgate.wiring import Services

__all__ = ["build_channels"]


def build_channels(services: Services) -> list[TelegramChannel]:
    """The configured channels of ``services``' home, not started."""
    settings = services.config.channels.telegram
    if settings is None:
        return []
    # Imported only when configured: a server without channels never loads the Bot API client.
    from sandgate.channels.telegram import TelegramChannel

    gateway = services.gateway

    def token() -> str | None:
        if settings.token_secret is not None:
            return gateway.secrets.resolve([settings.token_secret])[settings.token_secret]
        return os.environ.get(settings.token_env)

    def audit(record: dict[str, Any]) -> None:
        gateway.audit.submit(record)

    return [
        TelegramChannel(
            settings,
            services.agents,
            gateway.approvals,
            services.store,
            token=token,
            audit=audit,
        )
    ]
