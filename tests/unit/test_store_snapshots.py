"""Snapshot rows and the sandbox lifecycle columns, against SQLite and the real PostgreSQL."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import cast

import pytest

from sandgate.config import load_config
from sandgate.runtimes import Runtime
from sandgate.sandboxes.snapshots import SnapshotService
from sandgate.store import Sandbox, Snapshot, SnapshotPage, SnapshotRecords, Store
from tests.fixtures.postgres import postgres_database

NOW = datetime(2026, 12, 1, tzinfo=UTC)


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Store]:
    if request.param == "sqlite":
        opened = Store.open(f"sqlite:///{tmp_path / 'store.db'}")
        yield opened
        opened.close()
        return
    with postgres_database() as url:
        opened = Store.open(url)
        yield opened
        opened.close()


def _snapshot(snapshot_id: str, team: str, minutes: int, **extra: object) -> Snapshot:
    values: dict[str, object] = dict(
        id=snapshot_id,
        team_id=team,
        kind="snapshot",
        state="ready",
        name=None,
        tag=None,
        source_sandbox_id="src",
        template_id="t",
        image_ref="sandgate/template-base@sha256:x",
        cpu_count=1,
        memory_mb=512,
        size_bytes=3 * 2**30,  # beyond 32 bits: the column is a BIGINT
        created_at=NOW + timedelta(minutes=minutes),
    )
    values.update(extra)
    return Snapshot(**values)


def test_snapshot_rows_page_filter_and_account(store: Store) -> None:
    for team in ("team_a", "team_b"):
        store.get_or_create_team(team, team, NOW)
    records = SnapshotRecords(store)
    records.add(_snapshot("s1", "team_a", 1))
    records.add(_snapshot("s2", "team_a", 2, name="web", tag="default"))
    records.add(_snapshot("s3", "team_a", 3, source_sandbox_id="other"))
    records.add(_snapshot("p1", "team_a", 4, kind="pause", size_bytes=10))
    records.add(_snapshot("w1", "team_a", 5, state="saving"))
    records.add(_snapshot("b1", "team_b", 6))

    def ids(**kwargs: object) -> list[str]:
        options: dict[str, object] = {
            "source_sandbox_id": None, "names": None, "ids": None, "limit": 10, "after": None,
        }  # fmt: skip
        options.update(kwargs)
        page = records.page("team_a", "snapshot", "ready", **options)  # type: ignore[arg-type]
        return [row.id for row in page.snapshots]

    assert ids() == ["s3", "s2", "s1"]  # newest first; other kinds, states and teams left out
    assert ids(source_sandbox_id="src") == ["s2", "s1"]
    assert ids(names=[("web", None)], ids=["web"]) == ["s2"]
    assert ids(names=[("web", "v9")], ids=["web"]) == []
    assert ids(names=[("s1", None)], ids=["s1"]) == ["s1"]

    def page(after: tuple[datetime, str] | None) -> SnapshotPage:
        return records.page(
            "team_a", "snapshot", "ready",
            source_sandbox_id=None, names=None, ids=None, limit=2, after=after,
        )  # fmt: skip

    first = page(None)
    assert [r.id for r in first.snapshots] == ["s3", "s2"] and first.next_token
    created, last = first.next_token.split("|", 1)
    rest = page((datetime.fromisoformat(created), last))
    assert [r.id for r in rest.snapshots] == ["s1"] and rest.next_token is None

    assert records.bytes_used("team_a") == 4 * 3 * 2**30 + 10
    assert records.bytes_used("team_b") == 3 * 2**30
    assert [r.id for r in records.of_source("src", "pause")] == ["p1"]
    assert [r.id for r in records.named("team_a", "snapshot", "web", "default")] == ["s2"]
    records.delete("s2")
    assert records.get("s2") is None and records.named("team_a", "snapshot", "web", "default") == []


def test_sandbox_lifecycle_columns_default_to_kill(store: Store) -> None:
    store.get_or_create_team("t", "t", NOW)
    store.add_sandbox(
        Sandbox(
            id="sb",
            team_id="t",
            api_key_id=None,
            template_id="t",
            alias="base",
            state="stored",
            runtime="bwrap",
            runtime_ref=None,
            access_token="tok",
            metadata_={},
            cpu_count=1,
            memory_mb=512,
            disk_size_mb=1024,
            envd_version="0.6.4",
            allow_internet_access=False,
            started_at=NOW,
            end_at=NOW,
            ended_at=None,
        )
    )
    row = store.sandbox("sb")
    assert row is not None
    assert (row.on_timeout, row.auto_pause_memory, row.auto_resume) == ("kill", True, False)
    assert (row.image_ref, row.timeout_s) == (None, None)
    # A sandbox paused to disk still exists (and expires), but holds no live resources.
    assert [r.id for r in store.kept_sandboxes()] == ["sb"]
    assert store.count_live("t") == 0
    assert [r.id for r in store.expired_sandboxes(NOW + timedelta(seconds=1))] == ["sb"]


def test_a_snapshot_reference_resolves_by_id_then_by_name(store: Store, tmp_path: Path) -> None:
    """``SnapshotService.resolve`` (every create asks it, in one statement): an id of the
    team's ready snapshot, with its tag if one is given, else the team's ready snapshot of
    that name and tag; never another team's, another kind's or one still saving."""
    for team in ("team_a", "team_b"):
        store.get_or_create_team(team, team, NOW)
    records = SnapshotRecords(store)
    records.add(_snapshot("s1", "team_a", 1))
    records.add(_snapshot("s2", "team_a", 2, name="web", tag="default"))
    records.add(_snapshot("p1", "team_a", 3, kind="pause", name="paused", tag="default"))
    records.add(_snapshot("w1", "team_a", 4, state="saving", name="soon", tag="default"))
    records.add(_snapshot("b1", "team_b", 5, name="web", tag="default"))
    records.add(_snapshot("s4", "team_a", 6, name="b1", tag="default"))  # named as b1's id
    (tmp_path / "sandgate.yaml").write_text("{}\n")
    config = load_config(tmp_path / "sandgate.yaml", environ={"SANDGATE_HOME": str(tmp_path)})
    service = SnapshotService(config, store, cast(Runtime, None))

    def resolved(ref: str, team: str = "team_a") -> str | None:
        found = service.resolve(team, ref)
        return found.id if found is not None else None

    assert resolved("s1") == "s1" and resolved("s1:default") == "s1"
    assert resolved("s2:v9") is None  # its tag is default
    assert resolved("web") == "s2" and resolved("web:default") == "s2"
    assert resolved("team-a/web") == "s2" and resolved("team_b/web") is None
    assert resolved("web", "team_b") == "b1" and resolved("s2", "team_b") is None
    assert resolved("b1") == "s4"  # team_b's id: not team_a's; team_a's snapshot of that name
    assert resolved("paused") is None and resolved("p1") is None  # a pause is no snapshot
    assert resolved("soon") is None and resolved("w1") is None  # still saving
    assert resolved("base") is None  # a template's name
