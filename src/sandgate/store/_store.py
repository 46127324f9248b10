"""The store: every durable fact about teams, keys, templates and sandboxes.

Services call these methods; none of them sees SQLAlchemy. SQLite runs in WAL mode with a
busy timeout so the reaper and request handlers never trip over each other; PostgreSQL is used
as is. Migrations (Alembic) run on open, so a new version upgrades the schema in place.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any, cast

from sqlalchemy import (
    Column,
    Connection,
    Engine,
    MetaData,
    PrimaryKeyConstraint,
    String,
    Table,
    bindparam,
    case,
    create_engine,
    event,
    func,
    insert,
    inspect,
    select,
    update,
)
from sqlalchemy.engine import make_url
from sqlalchemy.exc import DBAPIError, IntegrityError, OperationalError, ProgrammingError
from sqlalchemy.orm import Session, sessionmaker

from sandgate.errors import RuntimeUnavailable
from sandgate.store import workflow_models as _workflow_models  # noqa: F401  (their tables)
from sandgate.store.models import ApiKey, AuditEntry, Base, Sandbox, Team, Template

_MIGRATIONS = Path(__file__).with_name("migrations")
#: The newest migration's revision (``migrations/versions``). A new migration updates it;
#: tests/unit/test_store.py compares it with Alembic's own reading of the migrations.
SCHEMA_HEAD = "0012h"
#: Alembic's bookkeeping table, as Alembic itself creates it.
_VERSION_TABLE = Table(
    "alembic_version",
    MetaData(),
    Column("version_num", String(32), nullable=False),
    PrimaryKeyConstraint("version_num", name="alembic_version_pkc"),
)

#: Sandbox states that occupy resources and count against quotas (``resuming``: a sandbox
#: paused to disk booting again).
LIVE_STATES = ("starting", "running", "paused", "resuming")
#: Sandbox states of sandboxes that still exist: the live ones, and ``stored`` (paused to
#: disk: no processes, its layer kept under the gateway's home).
KEPT_STATES = (*LIVE_STATES, "stored")


# The statements every create, kill, authenticated request or reaper tick runs, built once:
# building a statement costs about as much as running it on SQLite (coercing each operand),
# ~0.25 ms apiece here, and a sandbox's life runs a dozen of them (docs/benchmarks.md,
# "Store: statements built once"). Parameters are bound at execution.
_API_KEY_BY_HASH = select(ApiKey).where(ApiKey.key_hash == bindparam("key_hash"))
_COUNT_LIVE = select(func.count()).select_from(Sandbox).where(Sandbox.state.in_(LIVE_STATES))
_COUNT_LIVE_OF_TEAM = _COUNT_LIVE.where(Sandbox.team_id == bindparam("team_id"))
_LIVE_COUNTS = (
    select(
        func.count(),
        func.coalesce(func.sum(case((Sandbox.team_id == bindparam("team_id"), 1), else_=0)), 0),
    )
    .select_from(Sandbox)
    .where(Sandbox.state.in_(LIVE_STATES))
)
_KEPT = select(Sandbox).where(Sandbox.state.in_(KEPT_STATES))
_LIVE = select(Sandbox).where(Sandbox.state.in_(LIVE_STATES))
_EXPIRED = _KEPT.where(Sandbox.end_at <= bindparam("now"))
#: The parameters' names differ from the columns': an UPDATE reserves those for its SET.
_UPDATE_IF = update(Sandbox).where(
    Sandbox.id == bindparam("_sandbox_id"), Sandbox.state == bindparam("_expected")
)
_START = (
    update(Sandbox)
    .where(Sandbox.id == bindparam("_sandbox_id"))
    .values(state="running", runtime_ref=bindparam("_ref"))
)
_COUNT_SPAWN = (
    update(Template)
    .where(Template.id == bindparam("template_id"))
    .values(spawn_count=Template.spawn_count + 1, last_spawned_at=bindparam("now"))
)


@dataclass(frozen=True)
class SandboxPage:
    sandboxes: list[Sandbox]
    next_token: str | None


class Store:
    """Synchronous, thread-safe facade over the database. Open with :meth:`open`."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self._sessions = sessionmaker(engine, expire_on_commit=False)

    @classmethod
    def open(cls, url: str) -> Store:
        """Connects, applies migrations and returns the store."""
        engine = _create_engine(url)
        store = cls(engine)
        store.migrate()
        return store

    @classmethod
    def connect(cls, url: str) -> Store:
        """The store at ``url`` as another process of the same server opens it (the audit
        writer process): connected, not migrated (the server migrated it)."""
        return cls(_create_engine(url))

    def migrate(self) -> None:
        """Brings the schema to ``SCHEMA_HEAD``.

        Alembic's import and its reading of every migration cost about a third of a second
        of CPU, paid by every server start and every CLI command. So a database already at
        the head is left alone, and an empty one gets the models' tables in one go and is
        stamped at the head (tests/unit/test_store.py checks that this is the schema the
        migrations build, column by column); only a database at an older revision (or one
        this code cannot place) goes through Alembic's upgrade.
        """
        try:
            for attempt in range(2):
                try:
                    with self.engine.begin() as connection:
                        state = _schema_state(connection)
                        if state == "current":
                            return
                        if state == "empty":
                            _create_schema(connection)
                            return
                    break
                except (OperationalError, IntegrityError, ProgrammingError):
                    # Another process created the schema meanwhile: look again, once.
                    if attempt == 1:
                        raise
            self._upgrade()
        except OperationalError as exc:
            raise RuntimeUnavailable(
                f"cannot open the database ({exc.orig}); check store.url"
            ) from None

    def _upgrade(self) -> None:
        # Imported here: Alembic is slow to import and only needed to upgrade.
        from alembic import command
        from alembic.config import Config as AlembicConfig

        cfg = AlembicConfig()
        cfg.set_main_option("script_location", str(_MIGRATIONS))
        with self.engine.begin() as connection:
            cfg.attributes["connection"] = connection
            command.upgrade(cfg, "heads")

    def close(self) -> None:
        self.engine.dispose()

    @contextmanager
    def session(self) -> Iterator[Session]:
        with self._sessions.begin() as session:
            yield session

    # -- teams and keys -------------------------------------------------------------------

    def get_or_create_team(self, name: str, team_id: str, now: datetime) -> Team:
        with self.session() as s:
            team = s.scalar(select(Team).where(Team.name == name))
            if team is None:
                team = Team(id=team_id, name=name, created_at=now)
                s.add(team)
            return team

    def add_api_key(self, key: ApiKey) -> None:
        with self.session() as s:
            s.add(key)

    def api_key_by_hash(self, key_hash: str) -> ApiKey | None:
        with self.session() as s:
            return s.scalar(_API_KEY_BY_HASH, {"key_hash": key_hash})

    def list_api_keys(self) -> Sequence[ApiKey]:
        with self.session() as s:
            return s.scalars(select(ApiKey).order_by(ApiKey.created_at)).all()

    def revoke_api_key(self, key_id: str, now: datetime) -> bool:
        with self.session() as s:
            key = s.get(ApiKey, key_id)
            if key is None:
                return False
            if key.revoked_at is None:
                key.revoked_at = now
            return True

    def team(self, team_id: str) -> Team | None:
        with self.session() as s:
            return s.get(Team, team_id)

    # -- templates ------------------------------------------------------------------------

    def upsert_template(self, template: Template) -> Template:
        with self.session() as s:
            existing = s.scalar(
                select(Template).where(Template.name == template.name, Template.team_id.is_(None))
            )
            if existing is None:
                s.add(template)
                return template
            for column in (
                "image_ref",
                "image_id",
                "digest",
                "envd_version",
                "cpu_count",
                "memory_mb",
                "start_cmd",
                "ready_port",
                "updated_at",
            ):
                setattr(existing, column, getattr(template, column))
            return existing

    def template_by_name_or_id(self, ref: str) -> Template | None:
        """A shipped template by name or id (team templates: ``TemplateRecords.find``)."""
        with self.session() as s:
            return s.scalar(
                select(Template).where(
                    Template.team_id.is_(None), (Template.name == ref) | (Template.id == ref)
                )
            )

    def list_templates(self) -> Sequence[Template]:
        with self.session() as s:
            return s.scalars(select(Template).order_by(Template.name)).all()

    # -- sandboxes ------------------------------------------------------------------------

    def add_sandbox(self, sandbox: Sandbox) -> None:
        with self.session() as s:
            s.add(sandbox)

    def sandbox(self, sandbox_id: str) -> Sandbox | None:
        with self.session() as s:
            return s.get(Sandbox, sandbox_id)

    def update_sandbox(self, sandbox_id: str, **values: Any) -> Sandbox | None:
        with self.session() as s:
            row = s.get(Sandbox, sandbox_id)
            if row is None:
                return None
            for name, value in values.items():
                setattr(row, name, value)
            return row

    def start_sandbox(self, row: Sandbox, runtime_ref: str, now: datetime) -> bool:
        """Marks a booted sandbox running, in the store and on ``row`` (the create's own
        copy), and counts the spawn on its template: a create's last two writes, in one
        transaction of two plain statements (loading the row back through the ORM and
        flushing it cost more than both, on every create). False, and nothing written, when
        the row is gone (the sandbox was killed meanwhile)."""
        with self.engine.begin() as connection:
            result = connection.execute(_START, {"_sandbox_id": row.id, "_ref": runtime_ref})
            if cast(Any, result).rowcount != 1:
                return False
            connection.execute(_COUNT_SPAWN, {"template_id": row.template_id, "now": now})
        row.state = "running"
        row.runtime_ref = runtime_ref
        return True

    def update_sandbox_if(self, sandbox_id: str, expected: str, /, **values: Any) -> bool:
        """Sets ``values`` only while the sandbox's state is still ``expected``, in one statement;
        False when it is not (gone, or moved on by another process meanwhile). What two
        gateways acting on one sandbox (a server and a CLI kill) decide the winner with."""
        with self.session() as s:
            result = s.execute(
                _UPDATE_IF.values(**values), {"_sandbox_id": sandbox_id, "_expected": expected}
            )
            return bool(cast(Any, result).rowcount == 1)

    def delete_sandbox(self, sandbox_id: str) -> None:
        with self.session() as s:
            row = s.get(Sandbox, sandbox_id)
            if row is not None:
                s.delete(row)

    def count_live(self, team_id: str | None = None) -> int:
        with self.session() as s:
            if team_id is None:
                return int(s.scalar(_COUNT_LIVE) or 0)
            return int(s.scalar(_COUNT_LIVE_OF_TEAM, {"team_id": team_id}) or 0)

    def live_counts(self, team_id: str) -> tuple[int, int]:
        """(the team's live sandboxes, all live sandboxes) in one statement: what a create's
        quota check reads, on every create."""
        with self.engine.connect() as connection:
            row = connection.execute(_LIVE_COUNTS, {"team_id": team_id}).one()
        return int(row[1] or 0), int(row[0] or 0)

    def kept_sandboxes(self) -> Sequence[Sandbox]:
        with self.session() as s:
            return s.scalars(_KEPT).all()

    def live_sandboxes(self) -> Sequence[Sandbox]:
        with self.session() as s:
            return s.scalars(_LIVE).all()

    def expired_sandboxes(self, now: datetime) -> Sequence[Sandbox]:
        with self.session() as s:
            return s.scalars(_EXPIRED, {"now": now}).all()

    def list_sandboxes(
        self,
        team_id: str,
        states: Sequence[str],
        metadata: dict[str, str],
        limit: int,
        after: tuple[datetime, str] | None,
    ) -> SandboxPage:
        """Newest first; ``after`` is the (started_at, id) of the last row of the prior page.

        Metadata is matched in Python: it is a JSON column and pages are small.
        """
        with self.session() as s:
            query = (
                select(Sandbox)
                .where(Sandbox.team_id == team_id, Sandbox.state.in_(states))
                .order_by(Sandbox.started_at.desc(), Sandbox.id.desc())
            )
            if after is not None:
                started, last_id = after
                query = query.where(
                    (Sandbox.started_at < started)
                    | ((Sandbox.started_at == started) & (Sandbox.id < last_id))
                )
            rows: list[Sandbox] = []
            more = False
            for row in s.scalars(query):
                if any(row.metadata_.get(k) != v for k, v in metadata.items()):
                    continue
                if len(rows) == limit:
                    more = True
                    break
                rows.append(row)
        token = f"{rows[-1].started_at.isoformat()}|{rows[-1].id}" if more and rows else None
        return SandboxPage(rows, token)

    # -- audit index (the tool gateway's; audit/ owns the log itself) ---------------------

    def add_audit_entry(self, entry: AuditEntry) -> None:
        with self.session() as s:
            s.add(entry)

    def add_audit_entries(self, entries: Sequence[dict[str, Any]]) -> None:
        """Indexes a batch of records (``AuditEntry`` columns) in one transaction, all or
        none; one multi-row INSERT on the table, without the ORM (its unit of work and its
        ORM-enabled insert cost more than the insert: this is the audit writer's hot path)."""
        if not entries:
            return
        with self.engine.begin() as connection:
            connection.execute(_AUDIT_INSERT, list(entries))

    def audit_indexer(self) -> AuditIndexer:
        """``add_audit_entries`` on one connection kept for the audit writer's life."""
        return AuditIndexer(self.engine)

    def audit_head(self) -> tuple[int, str] | None:
        """(seq, hash) of the last indexed audit record: the log's anchor in the store."""
        with self.session() as s:
            row = s.execute(
                select(AuditEntry.seq, AuditEntry.hash).order_by(AuditEntry.seq.desc()).limit(1)
            ).first()
            return (int(row[0]), str(row[1])) if row is not None else None

    def audit_hashes(self, first: int, last: int) -> dict[int, str]:
        """The indexed hashes of audit records ``first``..``last``."""
        with self.session() as s:
            rows = s.execute(
                select(AuditEntry.seq, AuditEntry.hash).where(
                    AuditEntry.seq >= first, AuditEntry.seq <= last
                )
            )
            return {int(seq): str(digest) for seq, digest in rows}

    def audit_entries(
        self,
        *,
        tool: str | None = None,
        outcome: str | None = None,
        sandbox_id: str | None = None,
        team_id: str | None = None,
        after_seq: int = 0,
        limit: int = 1000,
    ) -> Sequence[AuditEntry]:
        """Oldest first, from ``after_seq`` (exclusive)."""
        with self.session() as s:
            query = select(AuditEntry).where(AuditEntry.seq > after_seq)
            if tool is not None:
                query = query.where(AuditEntry.tool == tool)
            if outcome is not None:
                query = query.where(AuditEntry.outcome == outcome)
            if sandbox_id is not None:
                query = query.where(AuditEntry.sandbox_id == sandbox_id)
            if team_id is not None:
                query = query.where(AuditEntry.team_id == team_id)
            return s.scalars(query.order_by(AuditEntry.seq).limit(limit)).all()

    def search_audit(
        self,
        *,
        team_id: str,
        tool: str | None = None,
        outcome: str | None = None,
        agent: str | None = None,
        sandbox_id: str | None = None,
        event_prefix: str | None = None,
        since: datetime | None = None,
        until: datetime | None = None,
        before_seq: int | None = None,
        limit: int = 100,
    ) -> Sequence[AuditEntry]:
        """A team's audit index rows, newest first (the console's search): exact matches on
        the given fields, ``event_prefix`` on the event name (``egress.``), ``since``
        inclusive, ``until`` exclusive, and ``before_seq`` (exclusive) to page back."""
        with self.session() as s:
            query = select(AuditEntry).where(AuditEntry.team_id == team_id)
            for column, value in (
                (AuditEntry.tool, tool),
                (AuditEntry.outcome, outcome),
                (AuditEntry.agent, agent),
                (AuditEntry.sandbox_id, sandbox_id),
            ):
                if value is not None:
                    query = query.where(column == value)
            if event_prefix is not None:
                query = query.where(AuditEntry.event.startswith(event_prefix, autoescape=True))
            if since is not None:
                query = query.where(AuditEntry.time >= since)
            if until is not None:
                query = query.where(AuditEntry.time < until)
            if before_seq is not None:
                query = query.where(AuditEntry.seq < before_seq)
            return s.scalars(query.order_by(AuditEntry.seq.desc()).limit(limit)).all()

    def last_audit_entry(self) -> AuditEntry | None:
        with self.session() as s:
            return s.scalar(select(AuditEntry).order_by(AuditEntry.seq.desc()).limit(1))


class AuditIndexer:
    """Indexes the audit writer's batches on one connection it keeps: checking a connection
    out of the pool and back in for every batch cost as much as the insert itself (the
    writer's whole batch waits on it). Used by one thread at a time: the audit writer indexes
    only under the log's ``flock``. A connection the database dropped while it was idle (a
    restart; the pool would have pinged it) is found by the batch's failure, which then runs
    once more on a fresh connection; any other failure drops the connection and raises."""

    def __init__(self, engine: Engine) -> None:
        self._engine = engine
        self._connection: Connection | None = None

    def add(self, entries: Sequence[dict[str, Any]]) -> None:
        """Indexes a batch (``AuditEntry`` columns) in one transaction, all or none."""
        if not entries:
            return
        try:
            self._insert(entries)
        except DBAPIError as exc:
            self.close()
            if not exc.connection_invalidated:
                raise
            try:
                self._insert(entries)  # nothing was committed: all or none, on a new connection
            except BaseException:
                self.close()
                raise
        except BaseException:
            self.close()
            raise

    def _insert(self, entries: Sequence[dict[str, Any]]) -> None:
        connection = self._connection
        if connection is None:
            connection = self._connection = self._engine.connect()
        with connection.begin():
            connection.execute(_AUDIT_INSERT, list(entries))

    def close(self) -> None:
        connection, self._connection = self._connection, None
        if connection is not None:
            with contextlib.suppress(Exception):
                connection.close()


#: The audit index's insert, built once (a Core insert on the table, see ``add_audit_entries``).
_AUDIT_INSERT = insert(cast(Table, AuditEntry.__table__))


def _schema_state(connection: Connection) -> str:
    """ "current" (at ``SCHEMA_HEAD``), "empty" (no table of ours) or "other"."""
    names = set(inspect(connection).get_table_names())
    if _VERSION_TABLE.name not in names:
        return "other" if names & set(Base.metadata.tables) else "empty"
    versions = set(connection.scalars(select(_VERSION_TABLE.c.version_num)))
    return "current" if versions == {SCHEMA_HEAD} else "other"


def _create_schema(connection: Connection) -> None:
    Base.metadata.create_all(connection)
    _VERSION_TABLE.create(connection)
    connection.execute(insert(_VERSION_TABLE).values(version_num=SCHEMA_HEAD))


def _create_engine(url: str) -> Engine:
    if url.startswith("sqlite"):
        path = url.split("///", 1)[-1]
        if path and path != ":memory:":
            Path(path).parent.mkdir(parents=True, exist_ok=True)
        engine = create_engine(url, connect_args={"timeout": 30, "check_same_thread": False})
        event.listen(engine, "connect", _sqlite_pragmas)
        return engine
    if url.startswith("postgresql://"):
        url = "postgresql+psycopg://" + url.removeprefix("postgresql://")
    # psycopg prepares a statement on the server after its fifth run on a connection, and
    # PostgreSQL then soon plans it once for any values: for a team's rows it assumes every
    # team has as many, so a small team's audit search walked every team's records newest
    # first (docs/benchmarks.md, "Store: sandbox history"). Each query is planned for its
    # own values instead (what psycopg2 always did).
    psycopg = make_url(url).get_driver_name() == "psycopg"
    prepare = {"prepare_threshold": None} if psycopg else {}
    return create_engine(url, pool_pre_ping=True, connect_args=prepare)


def _sqlite_pragmas(dbapi_connection: Any, _record: Any) -> None:
    cursor = dbapi_connection.cursor()
    cursor.execute("PRAGMA journal_mode=WAL")
    cursor.execute("PRAGMA synchronous=NORMAL")
    cursor.execute("PRAGMA foreign_keys=ON")
    cursor.execute("PRAGMA busy_timeout=30000")
    cursor.close()
