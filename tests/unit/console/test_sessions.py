"""Console sessions against a real SQLite store: what the cookie is, and what ends a session."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest

from sandgate.access import create_api_key, hash_secret
from sandgate.console._app import ASSETS_DIR, VENDOR, missing_assets
from sandgate.console._sessions import SessionTable
from sandgate.errors import Forbidden
from sandgate.store import Store


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    opened = Store.open(f"sqlite:///{tmp_path / 'store.db'}")
    opened.migrate()
    yield opened
    opened.close()


def test_a_session_is_a_random_id_bound_to_the_key_and_ends_with_it(store: Store) -> None:
    row, key = create_api_key(store, "team-a", "alice")
    table = SessionTable(store)
    cookie, session = table.open(hash_secret(key))
    assert key not in cookie and len(cookie) >= 40 and cookie != session.csrf
    found = table.get(cookie)
    assert found is not None and found.principal.api_key_id == row.id and not found.read_only
    assert found.csrf_ok(session.csrf) and not found.csrf_ok(None) and not found.csrf_ok("x")
    assert table.get(cookie + "x") is None and table.get(None) is None
    store.revoke_api_key(row.id, datetime.now(UTC))
    assert table.get(cookie) is None


def test_sign_out_ends_the_session_and_a_read_key_is_read_only(store: Store) -> None:
    _, key = create_api_key(store, "team-a", "viewer", frozenset({"read"}))
    table = SessionTable(store)
    cookie, session = table.open(hash_secret(key))
    assert session.read_only
    table.close(cookie)
    table.close(cookie)  # idempotent
    assert table.get(cookie) is None


def test_an_approvals_key_cannot_open_a_console_session(store: Store) -> None:
    _, key = create_api_key(store, "team-a", "approver", frozenset({"approvals"}))
    with pytest.raises(Forbidden, match="limited to approvals"):
        SessionTable(store).open(hash_secret(key))


def test_missing_assets_are_named(tmp_path: Path) -> None:
    assert missing_assets(tmp_path) == list(VENDOR)
    assert missing_assets(ASSETS_DIR) == []  # scripts/console-assets ran (scripts/test does)
