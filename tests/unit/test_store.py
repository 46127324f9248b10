"""The store against SQLite and against the real PostgreSQL the test command starts."""

import contextlib
import re
import secrets
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import Engine, create_engine, inspect, text
from sqlalchemy import event as sqlalchemy_event
from sqlalchemy.exc import IntegrityError

from sandgate.access import authenticate_api_key, create_api_key
from sandgate.errors import Unauthenticated
from sandgate.store import AgentRecords, AgentRun, Sandbox, Store, TelemetryRecords
from sandgate.store._store import _MIGRATIONS, SCHEMA_HEAD, _create_engine
from tests.fixtures.postgres import postgres_database, postgres_url


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


def _sandbox(team_id: str, sandbox_id: str, started: datetime, **extra: object) -> Sandbox:
    values: dict[str, object] = dict(
        id=sandbox_id,
        team_id=team_id,
        api_key_id=None,
        template_id="t",
        alias="base",
        state="running",
        runtime="docker",
        runtime_ref=None,
        access_token="tok",
        metadata_={},
        cpu_count=1,
        memory_mb=512,
        disk_size_mb=1024,
        envd_version="0.6.4",
        allow_internet_access=False,
        started_at=started,
        end_at=started + timedelta(seconds=300),
        ended_at=None,
    )
    values.update(extra)
    return Sandbox(**values)


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def new_database(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Callable[[], str]]:
    """Makes empty databases of the parameter's kind (dropped afterwards)."""
    with contextlib.ExitStack() as made:

        def make() -> str:
            if request.param == "sqlite":
                return f"sqlite:///{tmp_path / f'sg_test_{secrets.token_hex(4)}.db'}"
            return made.enter_context(postgres_database())

        yield make


def _alembic_upgrade(engine: Engine, revision: str) -> None:
    from alembic import command
    from alembic.config import Config

    cfg = Config()
    cfg.set_main_option("script_location", str(_MIGRATIONS))
    with engine.begin() as connection:
        cfg.attributes["connection"] = connection
        command.upgrade(cfg, revision)


def _schema(engine: Engine) -> dict[str, object]:
    """Every table's columns (type, nullability, server default), keys and indexes, as the
    database itself reports them."""
    found = inspect(engine)
    schema: dict[str, object] = {}
    for table in sorted(found.get_table_names()):
        columns = [
            (c["name"], str(c["type"]), c["nullable"], c.get("default"))
            for c in found.get_columns(table)
        ]
        keys = sorted(
            (tuple(fk["constrained_columns"]), fk["referred_table"], tuple(fk["referred_columns"]))
            for fk in found.get_foreign_keys(table)
        )
        indexes = sorted(
            (tuple(str(c) for c in i["column_names"]), bool(i["unique"]))
            for i in found.get_indexes(table)
        )
        uniques = sorted(tuple(u["column_names"]) for u in found.get_unique_constraints(table))
        primary = found.get_pk_constraint(table)["constrained_columns"]
        schema[table] = (sorted(columns), primary, keys, indexes, uniques)
    return schema


def _versions(engine: Engine) -> set[str]:
    with engine.connect() as conn:
        return set(conn.scalars(text("SELECT version_num FROM alembic_version")))


def test_the_schema_head_is_the_newest_migration() -> None:
    from alembic.config import Config
    from alembic.script import ScriptDirectory

    cfg = Config()
    cfg.set_main_option("script_location", str(_MIGRATIONS))
    assert set(ScriptDirectory.from_config(cfg).get_heads()) == {SCHEMA_HEAD}, (
        "a new migration: set store._store.SCHEMA_HEAD to its revision"
    )


def test_a_new_database_gets_the_schema_the_migrations_build(
    new_database: Callable[[], str],
) -> None:
    # A new database skips Alembic (its tables come from the models at once): the models
    # must describe exactly what every migration run in order builds.
    created = Store.open(new_database())
    migrated = _create_engine(new_database())
    _alembic_upgrade(migrated, "heads")
    assert _schema(created.engine) == _schema(migrated)
    assert _versions(created.engine) == _versions(migrated) == {SCHEMA_HEAD}
    created.close()
    migrated.dispose()


def test_an_older_database_is_upgraded_and_a_current_one_left_alone(
    new_database: Callable[[], str],
) -> None:
    url = new_database()
    older = _create_engine(url)
    _alembic_upgrade(older, "0008s")
    assert "channel_chats" not in inspect(older).get_table_names()
    older.dispose()
    store = Store.open(url)
    assert _versions(store.engine) == {SCHEMA_HEAD}
    assert "channel_chats" in inspect(store.engine).get_table_names()
    statements: list[str] = []
    sqlalchemy_event.listen(
        store.engine, "before_cursor_execute", lambda *args: statements.append(args[2])
    )
    store.migrate()  # at the head: reads the version, changes nothing
    assert statements and all(s.lstrip().upper().startswith("SELECT") for s in statements), (
        statements
    )
    store.close()


def test_migrations_are_idempotent(store: Store) -> None:
    store.migrate()
    store.migrate()
    assert store.list_templates() == []


def test_api_key_lifecycle(store: Store) -> None:
    row, key = create_api_key(store, "acme", "ci")
    assert key.startswith("e2b_") and len(key) == 44
    assert int(key[4:], 16) >= 0
    principal = authenticate_api_key(store, key)
    assert principal.team_id == row.team_id
    assert store.revoke_api_key(row.id, datetime.now(UTC))
    with pytest.raises(Unauthenticated):
        authenticate_api_key(store, key)
    with pytest.raises(Unauthenticated):
        authenticate_api_key(store, key + " ")
    assert all(k.key_hash != key for k in store.list_api_keys())


def test_list_pages_newest_first_with_metadata_filter(store: Store) -> None:
    team = store.get_or_create_team("t1", "team_t1", datetime.now(UTC))
    base = datetime(2026, 1, 1, tzinfo=UTC)
    for i in range(5):
        store.add_sandbox(
            _sandbox(
                team.id,
                f"sbx{i}",
                base + timedelta(seconds=i),
                metadata_={"suite": "a" if i % 2 == 0 else "b"},
            )
        )
    first = store.list_sandboxes(team.id, ["running"], {"suite": "a"}, 2, None)
    assert [s.id for s in first.sandboxes] == ["sbx4", "sbx2"]
    assert first.next_token is not None
    started, last = first.next_token.split("|")
    second = store.list_sandboxes(
        team.id, ["running"], {"suite": "a"}, 2, (datetime.fromisoformat(started), last)
    )
    assert [s.id for s in second.sandboxes] == ["sbx0"]
    assert second.next_token is None


def test_counts_and_expiry(store: Store) -> None:
    team = store.get_or_create_team("t2", "team_t2", datetime.now(UTC))
    now = datetime.now(UTC)
    store.add_sandbox(_sandbox(team.id, "old", now - timedelta(hours=1)))
    store.add_sandbox(_sandbox(team.id, "new", now))
    store.add_sandbox(_sandbox(team.id, "dead", now, state="killed"))
    assert store.count_live(team.id) == 2
    # The quota check's one statement: the team's live sandboxes and every team's.
    other = store.get_or_create_team("t3", "team_t3", now)
    store.add_sandbox(_sandbox(other.id, "theirs", now))
    store.add_sandbox(_sandbox(other.id, "theirs-dead", now, state="killed"))
    assert store.live_counts(team.id) == (2, 3)
    assert store.live_counts(other.id) == (1, 3)
    assert store.live_counts("nobody") == (0, 3)
    assert [s.id for s in store.expired_sandboxes(now)] == ["old"]
    assert store.sandbox("new") is not None
    assert store.sandbox("new").started_at.tzinfo is not None  # type: ignore[union-attr]


def test_live_sandbox_queries_are_served_by_an_index_not_the_history(store: Store) -> None:
    # Ended sandboxes stay in the table for good (a team's metrics are computed from them), so
    # a query that looks for live ones by state must not read the ended ones: the reaper's
    # runs every second, the collectors' every few seconds, the quota count at every create.
    team = store.get_or_create_team("t9", "team_t9", datetime.now(UTC))
    now = datetime.now(UTC)
    with store.session() as s:
        for i in range(300):
            s.add(_sandbox(team.id, f"ended{i}", now - timedelta(days=1), state="killed"))
    store.add_sandbox(_sandbox(team.id, "live", now))
    with statements_on(store, "sandboxes") as statements:
        assert [s.id for s in store.expired_sandboxes(now + timedelta(hours=1))] == ["live"]
        assert store.count_live() == 1
        assert store.count_live(team.id) == 1
        assert [s.id for s in store.live_sandboxes()] == ["live"]
        assert [s.id for s in store.kept_sandboxes()] == ["live"]
        assert [
            s.id for s in store.list_sandboxes(team.id, ["running"], {}, 10, None).sandboxes
        ] == ["live"]
    assert len(statements) == 6
    assert_served_by_an_index(store, "sandboxes", statements)


def test_a_teams_history_queries_read_their_window_not_the_whole_history(store: Store) -> None:
    # The other queries that read the history kept for good: a team's metrics (the sandboxes
    # alive at some moment of a time window) and its audit index (newest first for the
    # console, from a sequence number on for /v1/audit). A team's old sandboxes, and the
    # other teams' audit rows, are not theirs to read.
    team = store.get_or_create_team("t10", "team_t10", datetime.now(UTC))
    other = store.get_or_create_team("t11", "team_t11", datetime.now(UTC))
    now = datetime.now(UTC)
    long_ago = now - timedelta(days=30)
    with store.session() as s:
        for i in range(300):
            s.add(_sandbox(team.id, f"old{i}", long_ago, state="killed", ended_at=long_ago))
        s.add(_sandbox(team.id, "ended", now - timedelta(hours=2), state="killed",
                       ended_at=now - timedelta(minutes=30)))  # fmt: skip
        s.add(_sandbox(team.id, "paused", now - timedelta(hours=3), state="paused"))
    store.add_sandbox(_sandbox(team.id, "live", now - timedelta(minutes=5)))
    store.add_sandbox(_sandbox(team.id, "later", now + timedelta(hours=2)))
    records = TelemetryRecords(store)
    with statements_on(store, "sandboxes") as statements:
        lived = records.lifetimes(team.id, now - timedelta(hours=1), now)
    assert sorted(start for start, _ in lived) == sorted(
        [now - timedelta(hours=3), now - timedelta(hours=2), now - timedelta(minutes=5)]
    )
    assert sorted((end for _, end in lived if end is not None)) == [now - timedelta(minutes=30)]
    # The ended ones by their end, the kept ones by their state (only the live few).
    assert_served_by_an_index(store, "sandboxes", statements, narrowed_by=["ended_at", "state"])

    store.add_audit_entries(
        [
            {"seq": seq, "time": now, "event": "tool.call", "sandbox_id": "s",
             "team_id": team.id if seq % 100 == 0 else other.id, "agent": None, "tool": "kv",
             "action": "get", "outcome": "allowed", "rule_id": None, "duration_ms": 1.0,
             "hash": f"{seq:064x}"}
            for seq in range(1, 401)
        ]
    )  # fmt: skip
    with statements_on(store, "audit_entries") as statements:
        assert [r.seq for r in store.search_audit(team_id=team.id, limit=2)] == [400, 300]
        assert [r.seq for r in store.audit_entries(team_id=team.id, after_seq=150)] == [
            200, 300, 400
        ]  # fmt: skip
    assert_served_by_an_index(store, "audit_entries", statements)


@pytest.mark.postgres
def test_each_postgres_query_is_planned_for_its_own_values() -> None:
    # A statement psycopg prepared on the server (after its fifth run on a connection) soon
    # gets one plan for any values, made as if every team had as many rows: a small team's
    # audit search then walked every team's records. Nothing is left prepared. (SQLite plans
    # each statement it is given.)
    engine = _create_engine(postgres_url())
    try:
        with engine.connect() as conn:
            for _ in range(10):
                conn.execute(text("SELECT count(*) FROM pg_class WHERE relname = :n"), {"n": "x"})
            prepared = conn.exec_driver_sql("SELECT name FROM pg_prepared_statements").all()
    finally:
        engine.dispose()
    assert prepared == []


def test_the_agent_runs_still_active_are_found_without_reading_every_run(store: Store) -> None:
    # Runs stay for good (their traces are the history); the runner's start looks for those a
    # previous process left active, and ending a session checks for its own active run.
    now = datetime.now(UTC)

    def run(run_id: str, session_id: str, state: str) -> AgentRun:
        return AgentRun(id=run_id, session_id=session_id, agent_id="a", team_id="t",
                        state=state, message="m", answer=None, stop_reason=None, error=None,
                        created_at=now, ended_at=None)  # fmt: skip

    with store.session() as s:
        s.add_all(run(f"done{i}", f"s{i % 7}", "completed") for i in range(300))
        s.add(run("busy", "s1", "running"))
    records = AgentRecords(store)
    with statements_on(store, "agent_runs") as statements:
        assert [r.id for r in records.active_runs()] == ["busy"]
        assert records.has_active_run("s1") is True
        assert records.has_active_run("s2") is False
    assert_served_by_an_index(store, "agent_runs", statements)


@contextmanager
def statements_on(store: Store, table: str) -> Iterator[list[tuple[str, Any]]]:
    """The SQL (with its parameters) that the block sends about ``table``."""
    statements: list[tuple[str, Any]] = []

    def seen(_conn, _cursor, statement, parameters, _context, _many) -> None:  # type: ignore[no-untyped-def]
        if f" {table} " in f" {statement} ".replace("\n", " "):
            statements.append((statement, parameters))

    sqlalchemy_event.listen(store.engine, "before_cursor_execute", seen)
    try:
        yield statements
    finally:
        sqlalchemy_event.remove(store.engine, "before_cursor_execute", seen)


def assert_served_by_an_index(
    store: Store,
    table: str,
    statements: list[tuple[str, Any]],
    *,
    narrowed_by: Sequence[str] = (),
) -> None:
    """Each statement reads ``table`` through an index range, never the whole table; and,
    given ``narrowed_by``, each range is bounded by one of those columns too (a range on the
    team alone is the team's whole history: an index range all the same)."""
    inspector = inspect(store.engine)
    leading = {i["name"]: i["column_names"][0] for i in inspector.get_indexes(table)}
    leading[f"{table}_pkey"] = inspector.get_pk_constraint(table)["constrained_columns"][0]
    with store.engine.connect() as conn:
        for statement, parameters in statements:
            if conn.dialect.name == "sqlite":
                rows = conn.exec_driver_sql("EXPLAIN QUERY PLAN " + statement, parameters)
                plan = "\n".join(str(row[-1]) for row in rows)
                # "SEARCH" reads the index range it names; "SCAN" reads a whole table or index.
                assert f"SEARCH {table}" in plan and "SCAN" not in plan, (statement, plan)
                # Each search's condition: "SEARCH t USING INDEX ix (team_id=? AND seq>?)".
                searches = re.findall(rf"SEARCH {table} .*\((.*)\)", plan)
            else:
                # With the statistics autovacuum would gather by then: the choice between two
                # indexes is the planner's estimate, and a table just filled has none.
                conn.exec_driver_sql(f"ANALYZE {table}")
                conn.exec_driver_sql("SET enable_seqscan = off")
                rows = conn.exec_driver_sql("EXPLAIN " + statement, parameters)
                plan = "\n".join(str(row[0]) for row in rows)
                # A planner told to avoid sequential scans still takes one when no index fits;
                # an index whose first column is not in the condition is read whole.
                assert "Seq Scan" not in plan, (statement, plan)
                used = re.findall(r"Index (?:Only )?Scan (?:Backward )?(?:using|on) (\w+)", plan)
                searches = re.findall(r"Index Cond: (.*)", plan)
                assert used, (statement, plan)
                for index in used:
                    assert leading[index] in " ".join(searches), (statement, plan)
            if narrowed_by:
                assert all(any(c in search for c in narrowed_by) for search in searches), (
                    statement,
                    plan,
                )


def test_a_conditional_sandbox_update_has_one_winner(store: Store) -> None:
    # What two processes killing one sandbox decide by (SandboxService._terminate): the
    # second compare-and-set finds the state moved on and changes nothing.
    team = store.get_or_create_team("t3", "team_t3", datetime.now(UTC))
    now = datetime.now(UTC)
    store.add_sandbox(_sandbox(team.id, "cas", now))
    assert store.update_sandbox_if("cas", "running", state="killed", ended_at=now) is True
    later = now + timedelta(seconds=5)
    assert store.update_sandbox_if("cas", "running", state="killed", ended_at=later) is False
    row = store.sandbox("cas")
    assert row is not None and row.state == "killed"
    assert row.ended_at is not None and abs((row.ended_at - now).total_seconds()) < 1
    assert store.update_sandbox_if("missing", "running", state="killed") is False


def test_audit_search_is_the_teams_newest_first_with_filters(store: Store) -> None:
    """The console's audit search: one team's rows only, newest first, exact fields, an
    event prefix taken literally (``_`` and ``%`` are not wildcards), a time range."""
    start = datetime(2026, 12, 1, tzinfo=UTC)
    rows = []
    for seq, (team, event, tool, outcome) in enumerate(
        [
            ("a", "tool.call", "kv", "allowed"),
            ("a", "egress.connect", None, "denied"),
            ("b", "tool.call", "kv", "allowed"),
            ("a", "tool.call", "kv", "denied"),
            ("a", "egress_x.connect", None, "allowed"),
        ],
        start=1,
    ):
        rows.append(
            {
                "seq": seq,
                "time": start + timedelta(minutes=seq),
                "event": event,
                "sandbox_id": f"s{seq % 2}",
                "team_id": team,
                "agent": "analyst",
                "tool": tool,
                "action": "get",
                "outcome": outcome,
                "rule_id": "r",
                "duration_ms": 1.0,
                "hash": f"{seq:064x}",
            }
        )
    store.add_audit_entries(rows)

    def seqs(**filters: object) -> list[int]:
        return [r.seq for r in store.search_audit(team_id="a", **filters)]  # type: ignore[arg-type]

    assert seqs() == [5, 4, 2, 1]
    assert seqs(tool="kv", outcome="denied") == [4]
    assert seqs(event_prefix="egress.") == [2]
    assert seqs(since=start + timedelta(minutes=2), until=start + timedelta(minutes=5)) == [4, 2]
    assert seqs(before_seq=4, limit=1) == [2]
    assert seqs(sandbox_id="s1", agent="analyst") == [5, 1]


def _audit_row(seq: int) -> dict[str, object]:
    return {
        "seq": seq, "time": datetime.now(UTC), "event": "tool.call", "sandbox_id": "s",
        "team_id": None, "agent": None, "tool": "kv", "action": "get", "outcome": "allowed",
        "rule_id": None, "duration_ms": 1.0, "hash": f"{seq:064x}",
    }  # fmt: skip


def test_the_audit_indexer_keeps_its_connection_and_a_failed_batch_leaves_nothing(
    store: Store,
) -> None:
    indexer = store.audit_indexer()
    try:
        indexer.add([_audit_row(1), _audit_row(2)])
        indexer.add([_audit_row(3)])
        assert store.audit_head() == (3, f"{3:064x}")
        with pytest.raises(IntegrityError):
            indexer.add([_audit_row(4), _audit_row(3)])  # seq 3 again: the whole batch fails
        assert store.audit_head() == (3, f"{3:064x}")  # record 4 was not kept either
        indexer.add([_audit_row(4)])  # the next batch connects afresh
        assert sorted(store.audit_hashes(1, 10)) == [1, 2, 3, 4]
    finally:
        indexer.close()


@pytest.mark.postgres
def test_the_audit_indexer_reconnects_when_postgres_dropped_its_idle_connection() -> None:
    admin = create_engine(
        postgres_url().replace("postgresql://", "postgresql+psycopg://"),
        isolation_level="AUTOCOMMIT",
    )
    with postgres_database() as url:
        store = Store.open(url)
        indexer = store.audit_indexer()
        try:
            indexer.add([_audit_row(1)])
            # The database drops every connection while the indexer's is idle (as a restart
            # would); the pool pings its own before use, the indexer finds out by failing.
            with admin.connect() as conn:
                dropped = conn.execute(
                    text(
                        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = :n"
                    ),
                    {"n": url.rsplit("/", 1)[1]},
                ).all()
            assert dropped
            indexer.add([_audit_row(2)])
            assert sorted(store.audit_hashes(1, 10)) == [1, 2]
        finally:
            indexer.close()
            store.close()
            admin.dispose()
