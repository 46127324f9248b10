"""The workflows service: definitions (config, files, the API), runs, their events, schedules.

``start`` checks the inputs against the workflow's schema, records the run with a snapshot of
the definition (a run never changes workflow midway, even if the config does) and starts its
DBOS workflow; ``cancel`` and ``retry`` move a run and its DBOS workflow; ``events`` replays a
run's stored events and then follows it live, for SSE.

Trust: callers are authenticated by the interface (API key → ``Principal``); a team sees and
runs the config's workflows and its own API-defined ones, and sees only its own runs. A
workflow acting as an agent (``agent:``) may do so only for the teams the agent allows, the
rule a sandbox's ``sandgate.agent`` metadata follows: a team cannot borrow another's agent by
writing a workflow.
"""

from __future__ import annotations

import asyncio
import contextlib
import secrets
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

import jsonschema
import structlog
import yaml
from pydantic import ValidationError

from sandgate.access import Principal
from sandgate.config import Config
from sandgate.config._workflows import WorkflowConfig, check_workflow_references
from sandgate.errors import (
    ConfigError,
    Conflict,
    Forbidden,
    InvalidArguments,
    InvalidWorkflow,
    LimitExceeded,
    NotFound,
)
from sandgate.store import WorkflowRecords, WorkflowRun, WorkflowStepRecord
from sandgate.workflows.graph import compile_graph
from sandgate.workflows.state import (
    FINAL_RUN_STATES,
    RUN_MOVES,
    STEP_MOVES,
    RunState,
    StepState,
)

if TYPE_CHECKING:
    from sandgate.store import Store, WorkflowEvent
    from sandgate.workflows.engine import Engine

__all__ = ["Definition", "WorkflowService", "load_files"]

log = structlog.get_logger("sandgate.workflows")

FINAL_EVENTS = frozenset(f"run.{state.value}" for state in FINAL_RUN_STATES)
_LIVE_POLL_S = 1.0


@dataclass(frozen=True)
class Definition:
    workflow: WorkflowConfig
    #: ``config``, ``file`` or ``api``.
    source: str


class WorkflowService:
    def __init__(self, config: Config, store: Store) -> None:
        self._config = config
        self._store = store
        self._listeners: dict[str, list[asyncio.Event]] = {}
        self._loop: asyncio.AbstractEventLoop | None = None
        self.records = WorkflowRecords(
            store, run_moves=RUN_MOVES, step_moves=STEP_MOVES, on_event=self._on_event
        )
        self._context = config.workflow_context
        self._agent_teams = {a.id: list(a.teams) for a in config.agents}
        self._shared: dict[str, Definition] = {}
        for workflow in config.workflows.definitions:
            self._shared[workflow.name] = Definition(self._checked(workflow), "config")
        for workflow in load_files(config.workflows.paths, config.home_dir):
            if workflow.name in self._shared:
                raise ConfigError(
                    f"workflows: '{workflow.name}' is defined twice (config and a file)"
                )
            self._shared[workflow.name] = Definition(self._checked(workflow), "file")
        self.engine: Engine | None = None
        self._launch: Callable[[], Awaitable[Engine]] | None = None

    def attach(self, launch: Callable[[], Awaitable[Engine]]) -> None:
        """Binds the service to the running loop; ``launch()`` gives the engine, starting it
        the first time (the runtime starts it at once when runs may need recovering)."""
        self._launch = launch
        self._loop = asyncio.get_running_loop()

    def needs_engine_now(self) -> bool:
        """Whether the engine must start with the server rather than at the first run: it
        has shared (config or file) workflows, which may be scheduled, or runs that are not
        final, which it recovers."""
        if self._shared:
            return True
        live = [s.value for s in RunState if s not in FINAL_RUN_STATES]
        return bool(self.records.runs(states=live, limit=1))

    # -- definitions ----------------------------------------------------------------------

    def scheduled(self) -> list[WorkflowConfig]:
        return [d.workflow for d in self._shared.values() if d.workflow.schedule]

    def definitions(self, principal: Principal) -> list[Definition]:
        found = dict(self._shared)
        for row in self.records.definitions(principal.team_id):
            with contextlib.suppress(InvalidWorkflow):
                found.setdefault(row.name, Definition(self._parse(row.definition), "api"))
        return sorted(found.values(), key=lambda d: d.workflow.name)

    def definition(self, principal: Principal, name: str) -> Definition:
        if name in self._shared:
            return self._shared[name]
        row = self.records.definition(principal.team_id, name)
        if row is None:
            raise NotFound(f"workflow '{name}' not found (see `sandgate workflows list`)")
        return Definition(self._parse(row.definition), "api")

    def put_definition(self, principal: Principal, name: str, body: Any) -> Definition:
        """Creates or replaces a team's workflow; raises ``InvalidWorkflow`` naming the step,
        ``Conflict`` for a config workflow's name, ``LimitExceeded`` past the team's cap."""
        if not isinstance(body, dict):
            raise InvalidWorkflow("the body must be a workflow object")
        if body.get("name", name) != name:
            raise InvalidWorkflow(f"the body names workflow '{body.get('name')}', not '{name}'")
        if name in self._shared:
            raise Conflict(
                f"workflow '{name}' is defined in the server's configuration; pick another name"
            )
        workflow = self._parse({**body, "name": name})
        if workflow.schedule is not None:
            raise InvalidWorkflow(
                "schedule: only workflows in the server's configuration run on a schedule"
            )
        cap = self._config.workflows.max_api_definitions_per_team
        exists = self.records.definition(principal.team_id, name) is not None
        if not exists and self.records.count_definitions(principal.team_id) >= cap:
            raise LimitExceeded(
                f"this team has {cap} workflows (workflows.max_api_definitions_per_team)"
            )
        data = workflow.model_dump(mode="json", by_alias=True, exclude_defaults=True)
        self.records.put_definition(principal.team_id, name, data)
        return Definition(workflow, "api")

    def delete_definition(self, principal: Principal, name: str) -> None:
        if name in self._shared:
            raise Conflict(f"workflow '{name}' is defined in the configuration; edit it there")
        if not self.records.delete_definition(principal.team_id, name):
            raise NotFound(f"workflow '{name}' not found")

    def _parse(self, data: Any) -> WorkflowConfig:
        try:
            workflow = WorkflowConfig.model_validate(data, strict=True)
        except ValidationError as exc:
            first = exc.errors()[0]
            where = ".".join(str(p) for p in first["loc"])
            message = str(first["msg"]).removeprefix("Value error, ")
            raise InvalidWorkflow(
                f"invalid workflow: {where + ': ' if where else ''}{message}"
            ) from None
        return self._checked(workflow, error=InvalidWorkflow)

    def _checked(
        self, workflow: WorkflowConfig, error: type[Exception] = ConfigError
    ) -> WorkflowConfig:
        try:
            return check_workflow_references(workflow, *self._context)
        except ValueError as exc:
            raise error(str(exc)) from None

    # -- runs -----------------------------------------------------------------------------

    async def start(
        self,
        principal: Principal,
        name: str,
        inputs: Any,
        *,
        trigger: str = "api",
        agent: str | None = None,
    ) -> WorkflowRun:
        """Records a run of ``name`` and starts it. Raises ``NotFound``,
        ``InvalidArguments`` (inputs against the schema), ``Forbidden`` (an agent that does
        not act for this team)."""
        definition = self.definition(principal, name)
        run = self._new_run(principal, definition.workflow, inputs, trigger=trigger)
        self._check_agents(definition.workflow, principal.team_id)
        self.records.add_run(run, _step_rows(run.id, definition.workflow))
        log.info("workflow.run_started", run=run.id, workflow=name, trigger=trigger, agent=agent)
        await (await self._engine()).start(run.id, 1)
        return run

    async def start_for_tool(
        self, subject: Any, name: str, inputs: dict[str, Any], wait_s: float
    ) -> dict[str, Any]:
        """``workflow_run``'s call: a run for the calling sandbox's team and key."""
        principal = Principal(team_id=subject.team_id, api_key_id=subject.api_key_id or "")
        run = await self.start(principal, name, inputs, trigger="tool", agent=subject.agent)
        if wait_s > 0:
            run = await self.wait(run.id, wait_s)
        return {
            "run_id": run.id,
            "state": run.state,
            "output": run.output,
            "error": run.error,
        }

    async def start_scheduled(self, name: str, run_id: str, at: datetime) -> WorkflowRun:
        """Records the run a schedule starts at ``at`` (idempotent: ``run_id`` is derived
        from the schedule and time)."""
        workflow = self._shared[name].workflow
        team = self._store.get_or_create_team(
            workflow.schedule_team, "team_" + secrets.token_hex(8), datetime.now(UTC)
        )
        principal = Principal(team_id=team.id, api_key_id="")
        self._check_agents(workflow, team.id)
        run = self._new_run(
            principal, workflow, dict(workflow.schedule_inputs), trigger="schedule", run_id=run_id
        )
        log.info("workflow.scheduled_run", run=run_id, workflow=name, at=at.isoformat())
        return self.records.add_run(run, _step_rows(run.id, workflow))

    def create_child(
        self, parent: WorkflowRun, run_id: str, name: str, inputs: dict[str, Any]
    ) -> WorkflowRun:
        """The run a ``workflow`` step starts (idempotent: its id is derived)."""
        principal = Principal(team_id=parent.team_id, api_key_id=parent.api_key_id or "")
        definition = self.definition(principal, name)
        self._check_agents(definition.workflow, parent.team_id)
        run = self._new_run(
            principal,
            definition.workflow,
            inputs,
            trigger="workflow",
            run_id=run_id,
            parent=parent.id,
        )
        return self.records.add_run(run, _step_rows(run.id, definition.workflow))

    def _new_run(
        self,
        principal: Principal,
        workflow: WorkflowConfig,
        inputs: Any,
        *,
        trigger: str,
        run_id: str | None = None,
        parent: str | None = None,
    ) -> WorkflowRun:
        if not isinstance(inputs, dict):
            raise InvalidArguments(f"workflow '{workflow.name}': inputs must be an object")
        validator = jsonschema.Draft202012Validator(workflow.inputs)
        error = jsonschema.exceptions.best_match(validator.iter_errors(inputs))
        if error is not None:
            where = "/".join(str(p) for p in error.absolute_path) or "(inputs)"
            raise InvalidArguments(
                f"workflow '{workflow.name}': input {where}: {error.message[:300]}"
            )
        now = datetime.now(UTC)
        return WorkflowRun(
            id=run_id or "wfr_" + secrets.token_hex(8),
            workflow=workflow.name,
            team_id=principal.team_id,
            api_key_id=principal.api_key_id or None,
            state=RunState.QUEUED.value,
            trigger=trigger,
            inputs=inputs,
            definition=workflow.model_dump(mode="json", by_alias=True),
            output=None,
            error=None,
            error_code=None,
            failed_step=None,
            attempt=1,
            parent_run_id=parent,
            tool_calls=0,
            tokens=0,
            created_at=now,
            started_at=None,
            ended_at=None,
            deadline_at=now + timedelta(seconds=workflow.timeout_s),
        )

    def _check_agents(self, workflow: WorkflowConfig, team_id: str) -> None:
        names = {workflow.agent, *(getattr(s, "agent", None) for s in workflow.steps)}
        for agent in sorted(n for n in names if n):
            teams = self._agent_teams.get(agent)
            if teams is None:
                raise Forbidden(f"workflow '{workflow.name}': agent '{agent}' is not declared")
            if teams and team_id not in teams:
                raise Forbidden(
                    f"workflow '{workflow.name}': agent '{agent}' does not act for this team"
                )

    def run(self, principal: Principal, run_id: str) -> WorkflowRun:
        run = self.records.run(run_id)
        if run is None or run.team_id != principal.team_id:
            raise NotFound(f"workflow run '{run_id}' not found")
        return run

    def runs(
        self, principal: Principal, *, workflow: str | None = None, limit: int = 50
    ) -> Sequence[WorkflowRun]:
        return self.records.runs(team_id=principal.team_id, workflow=workflow, limit=limit)

    def steps(self, run_id: str) -> Sequence[WorkflowStepRecord]:
        return self.records.steps(run_id)

    async def cancel(self, principal: Principal, run_id: str) -> WorkflowRun:
        """Cancels a run that is not final: its running steps stop at their next checkpoint
        (a tool call under way finishes; a code step's sandbox is killed) and a pending
        approval is denied. Raises ``Conflict`` for a final run."""
        run = self.run(principal, run_id)
        if RunState(run.state) in FINAL_RUN_STATES:
            raise Conflict(f"cannot cancel workflow run {run_id}: it is {run.state}")
        engine = await self._engine()
        await engine.cancel(run.id, run.attempt)
        self.records.move_run(
            run.id,
            RunState.CANCELLED.value,
            ended_at=datetime.now(UTC),
            error="cancelled",
            error_code="cancelled",
        )
        for step in self.records.steps(run.id):
            if step.state in (StepState.RUNNING.value, StepState.WAITING.value):
                self.records.move_step(
                    run.id,
                    step.step_id,
                    StepState.CANCELLED.value,
                    attempt=run.attempt,
                    ended_at=datetime.now(UTC),
                    error="the run was cancelled",
                    error_code="cancelled",
                )
                approval = (step.detail or {}).get("approval")
                if approval:
                    with contextlib.suppress(Conflict, NotFound):
                        engine.executors.gateway.approvals.decide(
                            approval, approve=False, by="workflow-cancelled"
                        )
        for child in self.records.runs(
            states=[s.value for s in RunState if s not in FINAL_RUN_STATES], limit=1000
        ):
            if child.parent_run_id == run.id:
                with contextlib.suppress(Conflict):
                    await self.cancel(principal, child.id)
        return self.run(principal, run_id)

    async def retry(self, principal: Principal, run_id: str) -> WorkflowRun:
        """Runs a failed, interrupted, timed-out or cancelled run again from where it
        stopped: completed steps (and completed for_each elements) keep their outputs and
        are not run again. Raises ``Conflict`` for a run that is not in such a state."""
        run = self.run(principal, run_id)
        retryable = {RunState.FAILED, RunState.INTERRUPTED, RunState.TIMED_OUT, RunState.CANCELLED}
        if RunState(run.state) not in retryable:
            raise Conflict(
                f"cannot retry workflow run {run_id}: it is {run.state} (only failed, "
                "interrupted, timed_out or cancelled runs are retried)"
            )
        attempt = run.attempt + 1
        workflow = WorkflowConfig.model_validate(run.definition)
        self.records.update_run(
            run.id, deadline_at=datetime.now(UTC) + timedelta(seconds=workflow.timeout_s)
        )
        moved = self.records.reset_for_retry(
            run.id,
            attempt,
            run_to=RunState.QUEUED.value,
            step_to=StepState.PENDING.value,
            kept=(StepState.COMPLETED.value, StepState.SKIPPED.value),
        )
        if not moved:
            raise Conflict(f"workflow run {run_id} changed meanwhile; look again")
        log.info("workflow.run_retried", run=run.id, attempt=attempt)
        await (await self._engine()).start(run.id, attempt)
        return self.run(principal, run_id)

    async def wait(self, run_id: str, timeout_s: float | None = None) -> WorkflowRun:
        """Returns the run once it is final (or as it is after ``timeout_s``)."""

        async def final() -> None:
            async for _ in self.events(run_id):
                pass

        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(timeout_s):
                await final()
        run = self.records.run(run_id)
        if run is None:
            raise NotFound(f"workflow run '{run_id}' not found")
        return run

    # -- events ---------------------------------------------------------------------------

    async def events(self, run_id: str, after: int = 0) -> AsyncIterator[WorkflowEvent]:
        """Every event after id ``after``: stored ones, then new ones until the run ends."""
        wake = asyncio.Event()
        self._listeners.setdefault(run_id, []).append(wake)
        try:
            last = after
            while True:
                wake.clear()
                batch = await asyncio.to_thread(self.records.events, run_id, last)
                for event in batch:
                    last = event.id
                    yield event
                # A final event ends the stream only when nothing follows it (a retry's events
                # follow the attempt that failed) and the run is still final.
                if (
                    batch
                    and batch[-1].type in FINAL_EVENTS
                    and not await asyncio.to_thread(_more_attempts, self.records, run_id)
                ):
                    return
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(_LIVE_POLL_S):
                        await wake.wait()
        finally:
            listeners = self._listeners.get(run_id, [])
            with contextlib.suppress(ValueError):
                listeners.remove(wake)
            if not listeners:
                self._listeners.pop(run_id, None)

    def _on_event(self, run_id: str) -> None:
        """Called (from any thread) after an event is stored: wakes that run's followers."""
        loop = self._loop
        if loop is None or run_id not in self._listeners:
            return
        for wake in list(self._listeners.get(run_id, [])):
            loop.call_soon_threadsafe(wake.set)

    async def _engine(self) -> Engine:
        if self.engine is None and self._launch is not None:
            self.engine = await self._launch()
        if self.engine is None:
            raise ConfigError("the workflow engine is not running")
        return self.engine


def _more_attempts(records: WorkflowRecords, run_id: str) -> bool:
    """After a final event: whether the run was retried since (then following goes on)."""
    run = records.run(run_id)
    return run is not None and RunState(run.state) not in FINAL_RUN_STATES


def _step_rows(run_id: str, workflow: WorkflowConfig) -> list[WorkflowStepRecord]:
    graph = compile_graph(workflow)
    return [
        WorkflowStepRecord(
            run_id=run_id,
            step_id=node.id,
            kind=node.step.kind,
            state=StepState.PENDING.value,
            attempt=1,
            position=graph.order.index(node.id),
            depends_on=list(node.depends_on),
            started_at=None,
            ended_at=None,
            output=None,
            summary=None,
            error=None,
            error_code=None,
            items_total=None,
            items_done=0,
            item_outputs={},
            detail={},
        )
        for node in graph.nodes.values()
    ]


def load_files(paths: Sequence[str], home: Path) -> list[WorkflowConfig]:
    """The workflows in ``*.yaml``/``*.yml`` files under ``paths`` (relative to ``home``),
    one per file, sorted by file name; raises ``ConfigError`` naming the file and step."""
    from sandgate.config._load import _DuplicateKey, _StrictLoader

    found: list[WorkflowConfig] = []
    for directory in paths:
        root = (
            (home / directory).expanduser()
            if not Path(directory).is_absolute()
            else Path(directory)
        )
        if not root.is_dir():
            raise ConfigError(f"workflows.paths: {root} is not a directory")
        for path in sorted([*root.glob("*.yaml"), *root.glob("*.yml")]):
            try:
                data = yaml.load(path.read_text(encoding="utf-8"), Loader=_StrictLoader)  # noqa: S506
                found.append(WorkflowConfig.model_validate(data, strict=True))
            except (OSError, yaml.YAMLError, _DuplicateKey) as exc:
                raise ConfigError(f"workflow file {path}: {exc}") from None
            except ValidationError as exc:
                first = exc.errors()[0]
                where = ".".join(str(p) for p in first["loc"])
                message = str(first["msg"]).removeprefix("Value error, ")
                raise ConfigError(
                    f"workflow file {path}: {where + ': ' if where else ''}{message}"
                ) from None
    return found
