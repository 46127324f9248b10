"""Team secrets: names, write-only values, encryption at rest bound to the row, versions and
pages, against a real SQLite store."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import text

from sandgate.errors import Conflict, InvalidRequest, NotFound, QuotaExceeded
from sandgate.secrets import SecretUnreadable, TeamSecrets
from sandgate.store import SecretRecords, Store, Team

VALUE = "CANARY-team-secret-value"


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    opened = Store.open(f"sqlite:///{tmp_path / 'store.db'}")
    from datetime import UTC, datetime

    with opened.session() as s:
        for team in ("t1", "t2"):
            s.add(Team(id=team, name=team, created_at=datetime.now(UTC)))
    yield opened
    opened.close()


@pytest.fixture
def secrets(store: Store, tmp_path: Path) -> TeamSecrets:
    return TeamSecrets(SecretRecords(store), tmp_path / "keys" / "team.key", max_per_team=3)


def test_values_are_write_only_and_encrypted_at_rest(
    secrets: TeamSecrets, store: Store, tmp_path: Path
) -> None:
    row = secrets.create("t1", "OpenAI-Key", VALUE, {"env": "prod"})
    assert (row.name, row.current_version, row.metadata_) == ("openai-key", 1, {"env": "prod"})
    assert row.id.startswith("sec_")
    assert not hasattr(row, "value")
    assert secrets.resolve("t1", "OPENAI-KEY") == VALUE
    with store.session() as s:
        stored = s.execute(text("SELECT ciphertext FROM team_secrets")).scalar_one()
    assert VALUE not in stored
    assert VALUE.encode() not in (tmp_path / "store.db").read_bytes()
    assert (tmp_path / "keys" / "team.key").stat().st_mode & 0o777 == 0o600


def test_a_ciphertext_moved_to_another_row_does_not_decrypt(
    secrets: TeamSecrets, store: Store
) -> None:
    mine = secrets.create("t1", "a", VALUE, None)
    theirs = secrets.create("t2", "a", "other-value", None)
    with store.session() as s:
        s.execute(
            text("UPDATE team_secrets SET ciphertext = :c WHERE id = :i"),
            {"c": mine.ciphertext, "i": theirs.id},
        )
    with pytest.raises(SecretUnreadable, match="cannot be decrypted"):
        secrets.resolve("t2", "a")
    assert secrets.resolve("t1", "a") == VALUE


def test_update_adds_a_version_and_keeps_or_replaces_metadata(secrets: TeamSecrets) -> None:
    row = secrets.create("t1", "k", "v1", {"a": "1"})
    second = secrets.update("t1", row.id, "v2", None)
    assert (second.current_version, second.metadata_) == (2, {"a": "1"})
    third = secrets.update("t1", "k", "v3", {})
    assert (third.current_version, third.metadata_) == (3, {})
    assert secrets.resolve("t1", "k") == "v3"


def test_teams_see_only_their_own(secrets: TeamSecrets) -> None:
    row = secrets.create("t1", "k", "v", None)
    for call in (
        lambda: secrets.get("t2", row.id),
        lambda: secrets.get("t2", "k"),
        lambda: secrets.update("t2", "k", "x", None),
        lambda: secrets.delete("t2", "k"),
    ):
        with pytest.raises(NotFound):
            call()
    with pytest.raises(SecretUnreadable):
        secrets.resolve("t2", "k")
    assert secrets.missing("t2", {"k"}) == ["k"] and secrets.missing("t1", {"k"}) == []


def test_names_values_metadata_and_quota_are_checked(secrets: TeamSecrets) -> None:
    for name in ("", "a{b", "a}b", "tab\tname", "sec_x", " padded", "x" * 257):
        with pytest.raises(InvalidRequest):
            secrets.create("t1", name, "v", None)
    for value in ("", "a\nb", "a\rb", "a\0b", "a\x01b", "a\x7fb", "end ", "\tlead",
                  "x" * (16 * 1024 + 1)):  # fmt: skip
        with pytest.raises(InvalidRequest):
            secrets.create("t1", "ok", value, None)
    for metadata in (
        {f"k{i}": "v" for i in range(33)},
        {"": "v"},
        {"k": "v" * 1025},
        {f"k{i}": "v" * 1000 for i in range(9)},
    ):
        with pytest.raises(InvalidRequest):
            secrets.create("t1", "ok", "v", metadata)
    assert secrets.create("t1", "one", "tab\tinside é", None).name == "one"
    with pytest.raises(Conflict):
        secrets.create("t1", "ONE", "v", None)
    secrets.create("t1", "two", "v", None)
    secrets.create("t1", "three", "v", None)
    with pytest.raises(QuotaExceeded):
        secrets.create("t1", "four", "v", None)


def test_pages_by_name_with_a_cursor(secrets: TeamSecrets) -> None:
    for name in ("c", "a", "b"):
        secrets.create("t1", name, "v", None)
    first = secrets.page("t1", 2, None)
    assert [row.name for row in first.secrets] == ["a", "b"]
    assert first.next_token is not None
    rest = secrets.page("t1", 2, first.next_token)
    assert ([row.name for row in rest.secrets], rest.next_token) == (["c"], None)
    with pytest.raises(InvalidRequest):
        secrets.page("t1", 101, None)


def test_deleted_secrets_stop_resolving(secrets: TeamSecrets) -> None:
    secrets.create("t1", "k", "v", None)
    secrets.delete("t1", "k")
    with pytest.raises(SecretUnreadable, match="does not exist"):
        secrets.resolve("t1", "k")
