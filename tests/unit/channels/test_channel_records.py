"""The channel state in the store: the read position and each chat's session, on SQLite and
PostgreSQL (the ``store`` fixture of tests/unit/test_store.py)."""

from __future__ import annotations

from sandgate.store import ChannelRecords, Store
from tests.unit.test_store import store

__all__ = ["store"]


def test_the_cursor_starts_empty_and_never_moves_back(store: Store) -> None:
    records = ChannelRecords(store)
    assert records.position("telegram:1") is None
    records.advance("telegram:1", 41)
    records.advance("telegram:1", 42)
    records.advance("telegram:1", 40)  # a late writer cannot rewind it
    assert records.position("telegram:1") == 42
    assert records.position("telegram:2") is None


def test_a_chat_keeps_its_session_until_rebound(store: Store) -> None:
    records = ChannelRecords(store)
    assert records.chat("telegram", "7") is None
    records.set_chat("telegram", "7", "helper", "ses_1")
    row = records.chat("telegram", "7")
    assert row is not None and (row.agent_id, row.session_id) == ("helper", "ses_1")
    records.set_chat("telegram", "7", "helper", None)  # /new
    row = records.chat("telegram", "7")
    assert row is not None and row.session_id is None
