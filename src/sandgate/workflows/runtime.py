"""DBOS in a server process: launched once the services it drives are up, stopped before
they stop. ``launch`` recovers the runs that were in progress when the last process died
(their DBOS workflows replay from their checkpoints) and installs the config's schedules.

DBOS is a process-wide singleton; its async workflows, recovered and scheduled ones included,
run on the event loop that called ``launch`` (the server's), next to the services they call.

DBOS (about a second of imports, and its system database) is started with the server only when
it may have work at once: shared (config or file) workflows, which may be scheduled, runs left
unfinished by the last process, or an explicit ``workflows.database_url`` (so a wrong one fails
the start, as a config mistake should). Otherwise it starts at the first run.
"""

from __future__ import annotations

import asyncio
import importlib
import sqlite3
from pathlib import Path
from typing import TYPE_CHECKING, Any

import structlog

from sandgate.config import Config
from sandgate.errors import ConfigError
from sandgate.workflows.service import WorkflowService
from sandgate.workflows.steps import StepExecutors

if TYPE_CHECKING:
    from sandgate.agents import AgentRunner
    from sandgate.sandboxes import SandboxService
    from sandgate.store import Store
    from sandgate.tools import Gateway
    from sandgate.workflows.engine import Engine

__all__ = ["APPLICATION_VERSION", "WorkflowRuntime", "system_database_url"]

log = structlog.get_logger("sandgate.workflows")

#: DBOS recovers only workflows of the same application version. Bump it when a change to
#: the workflow code would make old checkpoints replay differently (then runs in progress
#: at an upgrade are not recovered; docs/workflows.md says so).
APPLICATION_VERSION = "sandgate-workflows-1"
_SCHEDULE_PREFIX = "sandgate:"


def system_database_url(config: Config) -> str:
    """DBOS's database: ``workflows.database_url``, else the store's when it is PostgreSQL,
    else SQLite under ``$SANDGATE_HOME/workflows/``."""
    url = config.workflows.database_url or (
        config.store.url if config.store.url.startswith("postgresql") else ""
    )
    if url:
        return url.replace("postgresql+psycopg://", "postgresql://", 1)
    directory = config.home_dir / "workflows"
    directory.mkdir(parents=True, exist_ok=True, mode=0o700)
    path = directory / "dbos.sqlite"
    _use_wal(path)
    return f"sqlite:///{path}"


def _use_wal(path: Path) -> None:
    """Puts DBOS's SQLite file in WAL mode (kept in the file): one fsync per checkpoint
    instead of several, with the same durability (``synchronous`` stays FULL)."""
    connection = sqlite3.connect(path)
    try:
        connection.execute("PRAGMA journal_mode=WAL")
    except sqlite3.Error as exc:
        raise ConfigError(f"workflows: cannot open {path}: {exc}") from None
    finally:
        connection.close()


class WorkflowRuntime:
    """The workflows service plus DBOS's lifecycle in this process."""

    def __init__(
        self,
        config: Config,
        store: Store,
        gateway: Gateway,
        sandboxes: SandboxService,
        agents: AgentRunner,
        *,
        instance_id: str,
    ) -> None:
        self._config = config
        self._instance_id = instance_id
        self.service = WorkflowService(config, store)
        self._executors = StepExecutors(
            gateway,
            sandboxes,
            agents,
            store,
            agent_teams={a.id: list(a.teams) for a in config.agents},
        )
        self.engine: Engine | None = None
        self._gateway = gateway
        self._launching = asyncio.Lock()
        self._launched = False
        self._stopped = False

    async def start(self) -> None:
        """Binds the service and the ``workflow_run`` tools; launches DBOS now if it may have
        work at once (see the module docstring), else at the first run."""
        self._stopped = False
        self.service.attach(self._launch)
        _bind_tools(self._gateway, self.service)
        if self._config.workflows.database_url or self.service.needs_engine_now():
            await self._launch()

    async def _launch(self) -> Engine:
        """Launches DBOS on the running loop (recovering runs) and applies the schedules,
        once; the engine."""
        async with self._launching:
            if self.engine is not None:
                return self.engine
            if self._stopped:
                raise ConfigError("the workflow engine is not running (the server is stopping)")
            # Imported in a thread: DBOS's imports take about a second, and the event loop
            # goes on serving meanwhile.
            module = await asyncio.to_thread(importlib.import_module, "sandgate.workflows.engine")
            engine: Engine = module.Engine(
                self.service.records,
                self._executors,
                create_child=self.service.create_child,
                create_scheduled=self.service.start_scheduled,
            )
            engine.install()
            try:
                await self._launch_dbos()
            except BaseException:
                engine.uninstall()
                raise
            self.engine = engine
            return engine

    async def _launch_dbos(self) -> None:
        from dbos import DBOS

        url = system_database_url(self._config)
        settings: Any = {
            "name": "sandgate",
            "system_database_url": url,
            "application_version": APPLICATION_VERSION,
            # Each installation recovers its own runs, even when several share a database.
            "executor_id": self._instance_id,
            "log_level": "WARNING",
            "notification_listener_polling_interval_sec": 0.2,
            "scheduler_polling_interval_sec": 1.0,
        }
        try:
            DBOS(config=settings)
            DBOS.launch()
        except Exception as exc:  # DBOS raises its own errors and SQLAlchemy's
            DBOS.destroy()
            raise ConfigError(
                f"workflows: cannot start the workflow engine on {_redacted(url)}: {exc}"
            ) from exc
        self._launched = True
        await asyncio.to_thread(self._apply_schedules)
        log.info("workflows.started", database=_redacted(url), workflows=len(self.service._shared))

    async def stop(self) -> None:
        async with self._launching:  # a launch under way finishes first
            self._stopped = True
        if self._launched:
            from dbos import DBOS

            await asyncio.to_thread(DBOS.destroy, workflow_completion_timeout_sec=0)
            self._launched = False
        _bind_tools(self._gateway, None)
        if self.engine is not None:
            self.engine.uninstall()
            self.engine = None

    def _apply_schedules(self) -> None:
        from dbos import DBOS

        from sandgate.workflows.engine import _scheduled_workflow

        wanted = {f"{_SCHEDULE_PREFIX}{w.name}": w for w in self.service.scheduled()}
        for existing in DBOS.list_schedules():
            name = existing["schedule_name"]
            if name.startswith(_SCHEDULE_PREFIX) and name not in wanted:
                DBOS.delete_schedule(name)
        if wanted:
            DBOS.apply_schedules(
                [
                    {
                        "schedule_name": name,
                        "workflow_fn": _scheduled_workflow,
                        "schedule": _with_seconds(workflow.schedule or ""),
                        "context": workflow.name,
                        "cron_timezone": workflow.schedule_timezone,
                    }
                    for name, workflow in wanted.items()
                ]
            )


def _with_seconds(cron: str) -> str:
    """DBOS reads six-field crons (seconds first); a five-field one fires at second 0."""
    return cron if len(cron.split()) == 6 else f"0 {cron}"


def _bind_tools(gateway: Gateway, service: WorkflowService | None) -> None:
    from sandgate.tools.builtin.workflow_run import WorkflowRunExecutor

    for tool in gateway.registry.all():
        if isinstance(tool.executor, WorkflowRunExecutor):
            tool.executor.bind(service)


def _redacted(url: str) -> str:
    """A database URL without its password."""
    if "@" in url and "://" in url:
        scheme, rest = url.split("://", 1)
        credentials, host = rest.rsplit("@", 1)
        user = credentials.split(":", 1)[0]
        return f"{scheme}://{user}:***@{host}" if ":" in credentials else url
    return url
