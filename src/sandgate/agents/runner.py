"""The agent runner service: sessions, runs, their events, and the pieces a run needs.

``submit`` records a run (one active run per session, enforced by the store) and starts it in
the background; ``events`` replays a run's stored events and then follows it live; ``wait``
returns a run once it is final; ``cancel`` stops an active run (here at once, or, when another
process runs it, at that process's next look at the store: ``CANCEL_POLL_S``).

Sessions live in the store. A session opened explicitly (``open_session``) keeps its sandbox
between runs: after a gateway restart it continues with its history and, while its sandbox
survives, with the same sandbox (and the same Python process), until ``end_session`` or the
sandbox's timeout. A run submitted without a session gets an *ephemeral* one, whose sandbox is
released (killed) as soon as each of its runs ends. Runs that were active when the gateway
stopped are marked failed.

Trust: callers are authenticated by the interface (API key → ``Principal``); a team sees only
its own sessions and runs, exactly like its sandboxes. Model API keys come from the gateway's
secrets or environment and never enter a sandbox or a prompt.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import os
import secrets
from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import structlog

from sandgate._periodic import Periodic
from sandgate._tasks import cancel_and_wait, wait_quietly
from sandgate.access import Principal
from sandgate.agents._gateway import GatewayAdapter
from sandgate.agents.execution import SandboxCode
from sandgate.agents.loop import Outcome, Turn, run_loop
from sandgate.agents.prompting import system_prompt, tool_specs
from sandgate.agents.providers import (
    Cooldowns,
    Message,
    ModelRouter,
    Provider,
    open_provider,
)
from sandgate.agents.skills import SkillsHook
from sandgate.agents.steps import FINAL_EVENTS, RunEvent, RunState
from sandgate.agents.stops import Progress, default_checks
from sandgate.config import AgentConfig, Config, ProviderConfig
from sandgate.config._agents import BUILTIN_PROVIDERS
from sandgate.errors import Conflict, NotFound, SandboxUnavailable, SandgateError
from sandgate.observability import tracing
from sandgate.sandboxes import CreateRequest, SandboxService
from sandgate.store import AgentRecords, AgentRun, AgentSession, Sandbox, Store
from sandgate.tools import AGENT_METADATA_KEY
from sandgate.tools.budgets import RunBudget

__all__ = ["SESSION_METADATA_KEY", "AgentRunner"]

log = structlog.get_logger("sandgate.agents")

SESSION_METADATA_KEY = "sandgate.session"
#: How often runs active in this process look for cancel requests made by other processes.
CANCEL_POLL_S = 0.25


@dataclass
class _Live:
    """A run in progress in this process: its task, its next event number, its listeners."""

    task: asyncio.Task[None] | None
    seq: int
    listeners: list[asyncio.Queue[RunEvent]]


class AgentRunner:
    def __init__(
        self,
        config: Config,
        store: Store,
        sandboxes: SandboxService,
        gateway: GatewayAdapter,
        skills: SkillsHook,
    ) -> None:
        self._config = config
        self._records = AgentRecords(store)
        self._store = store
        self._sandboxes = sandboxes
        self._gateway = gateway
        self._skills = skills
        self._agents = {a.id: a for a in config.agents}
        self._provider_settings: dict[str, ProviderConfig] = {
            **BUILTIN_PROVIDERS,
            **config.providers,
        }
        self._providers: dict[str, Provider] = {}
        self._cooldowns = Cooldowns()
        self._live: dict[str, _Live] = {}
        self._code: dict[str, SandboxCode] = {}
        #: Runs being cancelled here, and by whom.
        self._cancelling: dict[str, str] = {}
        self._poller = Periodic(
            "agent-run-cancels",
            self._check_cancels,
            interval_s=lambda: CANCEL_POLL_S,
            errors=Exception,  # the store hiccuped; look again next time
            on_error=lambda _: log.exception("agent.cancel_poll_failed"),
            wait_first=True,
        )

    # -- lifecycle ------------------------------------------------------------------------

    async def start(self) -> None:
        """Fails runs left active by a previous process (their loop is gone), releasing the
        sandboxes of their ephemeral sessions; starts watching for cancel requests."""
        for run in self._records.active_runs():
            if run.id in self._live:
                continue
            self._records.update_run(
                run.id,
                state=RunState.FAILED.value,
                stop_reason="interrupted",
                error="the gateway stopped while this run was active; send the message again",
                ended_at=datetime.now(UTC),
            )
            session = self._records.session(run.session_id)
            if session is not None and session.ephemeral and session.sandbox_id:
                await self._release(session, session.sandbox_id)
        self._poller.start()

    async def stop(self) -> None:
        """Cancels active runs (recorded as failed) and closes provider clients."""
        await self._poller.stop()
        for live in list(self._live.values()):
            if live.task is not None:
                await cancel_and_wait(live.task)
        for code in self._code.values():
            await code.close()
        for provider in self._providers.values():
            await provider.close()

    # -- queries --------------------------------------------------------------------------

    def agents(self) -> list[AgentConfig]:
        return list(self._agents.values())

    def agent(self, agent_id: str) -> AgentConfig:
        agent = self._agents.get(agent_id)
        if agent is None:
            raise NotFound(f"agent '{agent_id}' is not configured (see agents: in the config)")
        return agent

    def run(self, principal: Principal, run_id: str) -> AgentRun:
        run = self._records.run(run_id)
        if run is None or run.team_id != principal.team_id:
            raise NotFound(f"run '{run_id}' not found")
        return run

    def session(self, principal: Principal, session_id: str) -> AgentSession:
        session = self._records.session(session_id)
        if session is None or session.team_id != principal.team_id:
            raise NotFound(f"session '{session_id}' not found")
        return session

    def list_runs(
        self,
        principal: Principal,
        *,
        agent_id: str | None = None,
        states: list[str] | None = None,
        since: datetime | None = None,
        until: datetime | None = None,
        limit: int = 50,
    ) -> list[AgentRun]:
        """The team's runs, newest first, filtered by agent, state and creation time."""
        return list(
            self._records.runs(
                team_id=principal.team_id,
                agent_id=agent_id,
                states=states or (),
                since=since,
                until=until,
                limit=limit,
            )
        )

    def trace(self, run_id: str) -> list[RunEvent]:
        return [RunEvent(e.seq, e.type, e.data) for e in self._records.events(run_id)]

    # -- sessions -------------------------------------------------------------------------

    def open_session(self, principal: Principal, agent_id: str) -> AgentSession:
        """A session that keeps its sandbox (and Python state) between runs, until
        ``end_session`` or the sandbox's timeout. Raises ``NotFound`` (agent)."""
        agent = self.agent(agent_id)
        return self._new_session(principal, agent, ephemeral=False)

    async def end_session(self, principal: Principal, session_id: str) -> AgentSession:
        """Releases the session's sandbox (its history stays; a later run starts a new
        sandbox). Raises ``NotFound``, or ``Conflict`` while a run is active in it."""
        session = self.session(principal, session_id)
        if self._records.has_active_run(session_id):
            raise Conflict(f"session {session_id} has a run in progress; cancel it first")
        if session.sandbox_id:
            await self._release(session, session.sandbox_id)
        return self.session(principal, session_id)

    def _new_session(
        self, principal: Principal, agent: AgentConfig, *, ephemeral: bool
    ) -> AgentSession:
        now = datetime.now(UTC)
        session = AgentSession(
            id="ses_" + secrets.token_hex(8),
            agent_id=agent.id,
            team_id=principal.team_id,
            api_key_id=principal.api_key_id,
            sandbox_id=None,
            messages=[],
            created_at=now,
            updated_at=now,
            ephemeral=ephemeral,
        )
        self._records.add_session(session)
        return session

    # -- runs -----------------------------------------------------------------------------

    async def cancel(self, principal: Principal, run_id: str, *, by: str) -> AgentRun:
        """Cancels an active run of the team: at once when it runs in this process (its code
        is interrupted, an ephemeral session's sandbox released), otherwise as soon as the
        process running it looks (``CANCEL_POLL_S``). Raises ``NotFound``, or ``Conflict``
        when the run is already final."""
        run = self.run(principal, run_id)
        state = RunState(run.state)
        if state not in (RunState.QUEUED, RunState.RUNNING):
            raise Conflict(f"cannot cancel run {run_id}: it is {state.value}")
        self._records.request_cancel(run_id, by=by, at=datetime.now(UTC))
        live = self._live.get(run_id)
        if live is not None and live.task is not None:
            self._cancelling.setdefault(run_id, by)
            live.task.cancel()
            await wait_quietly(live.task)
            current = self._records.run(run_id)
            if current is not None and current.state in (RunState.QUEUED, RunState.RUNNING):
                # Cancelled before its task ever ran: nothing recorded the end yet.
                self._records.update_run(
                    run_id,
                    state=RunState.CANCELLED.value,
                    stop_reason="cancelled",
                    error=f"cancelled by {by}",
                    ended_at=datetime.now(UTC),
                )
                self._live.pop(run_id, None)
        return self.run(principal, run_id)

    async def _check_cancels(self) -> None:
        """Cancels runs of this process that another process (the CLI) asked to cancel."""
        if not self._live:
            return
        requested = self._records.cancel_requested(list(self._live))
        for run in requested:
            live = self._live.get(run.id)
            if live is not None and live.task is not None and run.id not in self._cancelling:
                self._cancelling[run.id] = run.cancelled_by or "another process"
                live.task.cancel()

    async def submit(
        self,
        principal: Principal,
        agent_id: str,
        message: str,
        session_id: str | None = None,
    ) -> AgentRun:
        """Records a run of ``message`` in the session (a new one if None) and starts it.

        Raises ``NotFound`` (agent, session) or ``Conflict`` (the session has an active run).
        """
        agent = self.agent(agent_id)
        now = datetime.now(UTC)
        if session_id is None:
            session = self._new_session(principal, agent, ephemeral=True)
        else:
            session = self.session(principal, session_id)
            if session.agent_id != agent.id:
                raise Conflict(f"session {session_id} belongs to agent '{session.agent_id}'")
        run = AgentRun(
            id="run_" + secrets.token_hex(8),
            session_id=session.id,
            agent_id=agent.id,
            team_id=principal.team_id,
            state=RunState.QUEUED.value,
            message=message,
            answer=None,
            stop_reason=None,
            error=None,
            steps=0,
            model_calls=0,
            prompt_tokens=0,
            completion_tokens=0,
            tool_calls=0,
            created_at=now,
            ended_at=None,
        )
        if not self._records.start_run(run):
            raise Conflict(
                f"session {session.id} already has a run in progress; wait for it to finish"
            )
        live = _Live(None, 0, [])
        self._live[run.id] = live
        live.task = asyncio.create_task(
            self._traced(run, session, agent, principal), name=f"agent-run-{run.id}"
        )
        return run

    async def _traced(
        self, run: AgentRun, session: AgentSession, agent: AgentConfig, principal: Principal
    ) -> None:
        """The run under one ``agent.run`` span (a child of the request that submitted it):
        its model calls, code and the tool calls the code makes are spans below it."""
        with tracing.span("agent.run", run__id=run.id, agent=agent.id, session__id=session.id):
            await self._execute(run, session, agent, principal)

    async def wait(self, run_id: str) -> AgentRun:
        """Returns the run once it is final."""
        live = self._live.get(run_id)
        if live is not None and live.task is not None:
            await wait_quietly(live.task)
        run = self._records.run(run_id)
        if run is None:
            raise NotFound(f"run '{run_id}' not found")
        return run

    async def events(self, run_id: str, after: int = 0) -> AsyncIterator[RunEvent]:
        """Every event after ``after``: stored ones, then live ones until the run ends."""
        queue: asyncio.Queue[RunEvent] = asyncio.Queue()
        live = self._live.get(run_id)
        if live is not None:
            live.listeners.append(queue)
        try:
            last = after
            for stored in self._records.events(run_id, after):
                last = stored.seq
                yield RunEvent(stored.seq, stored.type, stored.data)
                if stored.type in FINAL_EVENTS:
                    return
            if live is None or run_id not in self._live:
                return
            while True:
                event = await queue.get()
                if event.seq <= last:
                    continue
                last = event.seq
                yield event
                if event.type in FINAL_EVENTS:
                    return
        finally:
            if live is not None:
                with contextlib.suppress(ValueError):
                    live.listeners.remove(queue)

    def decide(self, principal: Principal, approval_id: str, *, approve: bool) -> None:
        """Approves or denies a pending approval of one of the team's sandboxes."""
        approval = self._gateway.gateway.approvals.get(approval_id)
        if approval.subject.get("team") != principal.team_id:
            raise NotFound(f"approval '{approval_id}' not found")
        self._gateway.decide(approval_id, approve=approve, by=principal.api_key_id)

    # -- one run --------------------------------------------------------------------------

    async def _execute(
        self, run: AgentRun, session: AgentSession, agent: AgentConfig, principal: Principal
    ) -> None:
        emit = self._emitter(run.id)
        progress = Progress(agent.budgets)
        messages = [Message.from_dict(m) for m in session.messages]
        outcome = Outcome(
            RunState.FAILED,
            "interrupted",
            error="the gateway stopped while this run was active; send the message again",
        )
        sandbox: Sandbox | None = None
        budget: RunBudget | None = None
        stopping = False
        try:
            self._records.update_run(run.id, state=RunState.RUNNING.value)
            emit(
                "run.started",
                {"run": run.id, "session": session.id, "agent": agent.id, "message": run.message},
            )
            sandbox = await self._sandbox_for(session, agent, principal)
            self._records.update_run(run.id, sandbox_id=sandbox.id)
            budget = self._gateway.gateway.run_budgets.open(
                sandbox.id,
                run.id,
                max_tool_calls=agent.budgets.max_tool_calls,
                wall_clock_s=progress.remaining_s(),
            )
            tools = self._gateway.tools_for(agent, sandbox)
            messages.append(Message("user", run.message))
            turn = Turn(
                agent=agent,
                system=system_prompt(agent, tools, self._skills.for_agent(agent)),
                messages=messages,
                router=self._router(agent),
                code=self._code_for(session.id, sandbox.id, agent),
                gateway=self._gateway,
                sandbox=sandbox,
                emit=emit,
                checks=default_checks(),
                progress=progress,
                tools=tool_specs(tools) if agent.mode == "classic" else (),
                budget=budget,
            )
            outcome = await run_loop(turn)
        except asyncio.CancelledError:
            by = self._cancelling.get(run.id)
            if by is None:
                stopping = True
                raise  # the gateway is stopping: recorded as interrupted
            outcome = Outcome(RunState.CANCELLED, "cancelled", error=f"cancelled by {by}")
            if sandbox is not None:
                code = self._code.get(f"{session.id}:{sandbox.id}")
                if code is not None:
                    await code.interrupt()
        except SandgateError as exc:
            outcome = Outcome(RunState.FAILED, exc.code, error=exc.message)
        except Exception as exc:  # our bug: recorded on the run, logged once, then raised
            log.exception("agent.run_crashed", run=run.id)
            outcome = Outcome(RunState.FAILED, "internal", error=f"internal error: {exc!r}")
            raise
        finally:
            if sandbox is not None and budget is not None:
                self._gateway.gateway.run_budgets.close(sandbox.id, budget)
            if session.ephemeral and sandbox is not None and not stopping:
                # Before the final event: a client that saw the run end finds it released.
                await self._release(session, sandbox.id)
            self._finish(run, session, outcome, progress, messages, sandbox, emit)
            self._cancelling.pop(run.id, None)

    def _finish(
        self,
        run: AgentRun,
        session: AgentSession,
        outcome: Outcome,
        progress: Progress,
        messages: list[Message],
        sandbox: Sandbox | None,
        emit: Any,
    ) -> None:
        usage = progress.usage
        self._records.update_session(
            session.id, messages=[m.as_dict() for m in messages], updated_at=datetime.now(UTC)
        )
        self._records.update_run(
            run.id,
            state=outcome.state.value,
            answer=outcome.answer,
            stop_reason=outcome.stop_reason,
            error=outcome.error,
            steps=progress.steps,
            model_calls=usage.model_calls,
            prompt_tokens=usage.prompt_tokens,
            completion_tokens=usage.completion_tokens,
            tool_calls=usage.tool_calls,
            ended_at=datetime.now(UTC),
        )
        summary = {
            "run": run.id,
            "state": outcome.state.value,
            "stop_reason": outcome.stop_reason,
            "usage": {
                "model_calls": usage.model_calls,
                "prompt_tokens": usage.prompt_tokens,
                "completion_tokens": usage.completion_tokens,
                "tool_calls": usage.tool_calls,
                "steps": progress.steps,
            },
        }
        if outcome.state is RunState.COMPLETED:
            emit("run.completed", {**summary, "answer": outcome.answer})
        else:
            emit("run.failed", {**summary, "error": outcome.error})
        self._audit(run, outcome, sandbox, summary)
        self._live.pop(run.id, None)

    def _audit(
        self, run: AgentRun, outcome: Outcome, sandbox: Sandbox | None, summary: dict[str, Any]
    ) -> None:
        record: dict[str, Any] = {
            "event": "agent.run",
            "sandbox": sandbox.id if sandbox else None,
            "subject": {"team": run.team_id, "agent": run.agent_id},
            "run": run.id,
            "session": run.session_id,
            "outcome": outcome.state.value,
            "stop_reason": outcome.stop_reason,
            "message_digest": "sha256:" + hashlib.sha256(run.message.encode()).hexdigest(),
            "usage": summary["usage"],
        }
        try:
            pending = self._gateway.gateway.audit.submit(record)
        except SandgateError as exc:
            log.error("agent.audit_failed", run=run.id, error=exc.message)
            return
        pending.add_done_callback(
            lambda done: (
                done.exception() is None
                or log.error("agent.audit_failed", run=run.id, error=str(done.exception()))
            )
        )

    def _emitter(self, run_id: str) -> Any:
        def emit(kind: str, data: dict[str, Any]) -> None:
            live = self._live.get(run_id)
            if live is None:
                return
            live.seq += 1
            event = RunEvent(live.seq, kind, data)
            self._records.add_event(run_id, event.seq, kind, data, datetime.now(UTC))
            for queue in live.listeners:
                queue.put_nowait(event)

        return emit

    # -- resources ------------------------------------------------------------------------

    async def _sandbox_for(
        self, session: AgentSession, agent: AgentConfig, principal: Principal
    ) -> Sandbox:
        """The session's sandbox, started (again) if it is gone; its deadline is extended."""
        owner = Principal(team_id=session.team_id, api_key_id=session.api_key_id or "")
        if session.sandbox_id and self._sandboxes.route(session.sandbox_id) is not None:
            with contextlib.suppress(SandgateError):
                self._sandboxes.set_timeout(owner, session.sandbox_id, agent.sandbox.timeout_s)
                row = self._store.sandbox(session.sandbox_id)
                if row is not None:
                    return row
        created = await self._sandboxes.create(
            owner,
            CreateRequest(
                template=agent.sandbox.template,
                timeout_s=agent.sandbox.timeout_s,
                metadata={AGENT_METADATA_KEY: agent.id, SESSION_METADATA_KEY: session.id},
                envs={},
                cpu_count=agent.sandbox.cpu_count,
                memory_mb=agent.sandbox.memory_mb,
            ),
        )
        self._records.update_session(session.id, sandbox_id=created.id)
        session.sandbox_id = created.id
        return created

    async def _release(self, session: AgentSession, sandbox_id: str) -> None:
        """Kills the session's sandbox (never raises: the run has already ended)."""
        code = self._code.pop(f"{session.id}:{sandbox_id}", None)
        owner = Principal(team_id=session.team_id, api_key_id=session.api_key_id or "")
        try:
            if code is not None:
                await code.close()
            await self._sandboxes.kill(owner, sandbox_id)
        except SandgateError as exc:
            log.info(
                "agent.sandbox_release", session=session.id, sandbox=sandbox_id, error=exc.message
            )
        self._records.update_session(session.id, sandbox_id=None)
        session.sandbox_id = None

    def _code_for(self, session_id: str, sandbox_id: str, agent: AgentConfig) -> SandboxCode:
        key = f"{session_id}:{sandbox_id}"
        code = self._code.get(key)
        if code is None:
            route = self._sandboxes.route(sandbox_id)
            if route is None:
                raise SandboxUnavailable(f"sandbox {sandbox_id} is not running")
            code = SandboxCode(route.guest, session_id, agent.sandbox.output_limit)
            self._code[key] = code
        return code

    def _router(self, agent: AgentConfig) -> ModelRouter:
        for choice in agent.models:
            if choice.provider not in self._providers:
                settings = self._provider_settings[choice.provider]
                self._providers[choice.provider] = open_provider(settings, self._api_key(settings))
        return ModelRouter(self._providers, self._provider_settings, self._cooldowns)

    def _api_key(self, settings: ProviderConfig) -> str | None:
        if settings.api_key_secret is not None:
            return self._gateway.gateway.secrets.resolve([settings.api_key_secret])[
                settings.api_key_secret
            ]
        if settings.api_key_env is not None:
            return os.environ.get(settings.api_key_env)
        return None
