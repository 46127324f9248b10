"""Durable state of chat channels (``sandgate.channels`` owns what it means; this module only
keeps rows): each channel's read position and each chat's agent session."""

from __future__ import annotations

from datetime import UTC, datetime

from sandgate.store._store import Store
from sandgate.store.models import ChannelChat, ChannelCursor

__all__ = ["ChannelRecords"]


class ChannelRecords:
    def __init__(self, store: Store) -> None:
        self._store = store

    def position(self, channel: str) -> int | None:
        """The last position ``channel`` recorded, or None before its first."""
        with self._store.session() as s:
            row = s.get(ChannelCursor, channel)
            return None if row is None else row.position

    def advance(self, channel: str, position: int) -> None:
        """Records ``position`` (committed when this returns); never moves backwards."""
        with self._store.session() as s:
            row = s.get(ChannelCursor, channel)
            now = datetime.now(UTC)
            if row is None:
                s.add(ChannelCursor(channel=channel, position=position, updated_at=now))
            elif position > row.position:
                row.position = position
                row.updated_at = now

    def chat(self, channel: str, chat_id: str) -> ChannelChat | None:
        with self._store.session() as s:
            return s.get(ChannelChat, (channel, chat_id))

    def set_chat(self, channel: str, chat_id: str, agent_id: str, session_id: str | None) -> None:
        """Binds the chat to ``agent_id``'s session ``session_id`` (None: the next message
        opens a new one)."""
        with self._store.session() as s:
            row = s.get(ChannelChat, (channel, chat_id))
            now = datetime.now(UTC)
            if row is None:
                s.add(
                    ChannelChat(
                        channel=channel,
                        chat_id=chat_id,
                        agent_id=agent_id,
                        session_id=session_id,
                        updated_at=now,
                    )
                )
            else:
                row.agent_id = agent_id
                row.session_id = session_id
                row.updated_at = now
