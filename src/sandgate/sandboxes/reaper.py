"""Keeping the store truthful about sandboxes over time: the reaper ends sandboxes past their
deadline, the sweep notices sandboxes that stopped on their own, and ``reattach`` adopts (or
removes) what the runtime still runs after a gateway restart.

The moves themselves (kill, pause, adopt) are the lifecycle service's; this module decides
when to make them. The store is the source of truth for what should exist, the runtime for
what does.
"""

from __future__ import annotations

import asyncio
import contextlib
import shutil
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path

import structlog

from sandgate._periodic import Periodic
from sandgate.errors import SandgateError
from sandgate.runtimes import Runtime, RuntimeState
from sandgate.sandboxes.publish import STAGING
from sandgate.sandboxes.snapshots import SnapshotService
from sandgate.sandboxes.state import SandboxState, check_transition
from sandgate.store import KEPT_STATES, LIVE_STATES, Sandbox, Store

__all__ = ["Reaper"]

log = structlog.get_logger("sandgate.sandboxes")

_REAP_INTERVAL_S = 1.0
#: How often running sandboxes are checked against the runtime (a safety net: a failed
#: connection to a guest triggers the same check at once), and how old a sandbox must be to be
#: checked (one created during the runtime's listing is not yet in it).
_SWEEP_INTERVAL_S = 10.0
_SWEEP_GRACE_S = 5.0


class Reaper:
    def __init__(
        self,
        store: Store,
        runtime: Runtime,
        snapshots: SnapshotService,
        root: Path,
        *,
        terminate: Callable[[str, str], Awaitable[None]],
        auto_pause: Callable[[str], Awaitable[None]],
        alive: Callable[[str], Awaitable[bool]],
        adopt: Callable[[Sandbox], Awaitable[None]],
    ) -> None:
        """``terminate(id, reason)`` kills a sandbox and marks its row killed; ``auto_pause``
        is the pause of a sandbox created with ``on_timeout="pause"``; ``alive`` says whether
        a guest answers; ``adopt`` makes a reattached running sandbox reachable again."""
        self._store = store
        self._runtime = runtime
        self._snapshots = snapshots
        self._root = root
        self._terminate = terminate
        self._auto_pause = auto_pause
        self._alive = alive
        self._adopt = adopt
        self._loop = Periodic(
            "sandbox-reaper",
            self._tick,
            interval_s=lambda: _REAP_INTERVAL_S,
            errors=SandgateError,
            on_error=lambda exc: log.warning("reaper.failed", error=exc.message),
        )
        self._swept = 0.0
        self._suspects: dict[str, asyncio.Task[None]] = {}

    def start(self) -> None:
        self._swept = asyncio.get_running_loop().time()
        self._loop.start()

    async def stop(self) -> None:
        await self._loop.stop()

    async def reattach(self) -> None:
        """Adopts the runtime's sandboxes that are still wanted; removes the rest.

        Sandboxes paused to disk have no runtime sandbox and stay as they are (one whose saved
        layer is gone is killed); one that was booting again when the gateway stopped goes
        back to paused-to-disk, and whatever its boot left in the runtime is removed; a
        running one found frozen (by a save the crash interrupted) is thawed and adopted."""
        now = datetime.now(UTC)
        seen: set[str] = set()
        for found in await self._runtime.list():
            seen.add(found.sandbox_id)
            row = self._store.sandbox(found.sandbox_id)
            if row is not None and row.state in (SandboxState.STORED, SandboxState.RESUMING):
                with contextlib.suppress(SandgateError):
                    await self._runtime.kill(found.sandbox_id)
                continue
            alive = row is not None and row.state in LIVE_STATES and row.end_at > now
            if alive and row is not None and row.state == SandboxState.PAUSED.value:
                if found.state is RuntimeState.PAUSED:
                    log.info("sandbox.reattached", sandbox=found.sandbox_id, state="paused")
                    continue
                alive = False
            running = found.state is RuntimeState.RUNNING
            if alive and not running and found.state is RuntimeState.PAUSED:
                with contextlib.suppress(SandgateError):
                    await self._runtime.resume(found.sandbox_id)
                    running = True
            if alive and running and await self._alive(found.sandbox_id):
                adopted = self._store.update_sandbox(
                    found.sandbox_id, state=SandboxState.RUNNING.value
                )
                if adopted is not None:
                    await self._adopt(adopted)
                log.info("sandbox.reattached", sandbox=found.sandbox_id)
                continue
            await self._terminate(found.sandbox_id, "expired or lost during restart")
        for row in self._store.live_sandboxes():
            if row.state == SandboxState.RESUMING:
                check_transition(row.id, SandboxState.RESUMING, SandboxState.STORED)
                self._store.update_sandbox(row.id, state=SandboxState.STORED.value)
                log.info("sandbox.reattached", sandbox=row.id, state="stored")
            elif row.id not in seen:
                await self._terminate(row.id, "its runtime sandbox is gone")
        for row in self._store.kept_sandboxes():
            if row.state == SandboxState.STORED and self._snapshots.pause_layer(row.id) is None:
                await self._terminate(row.id, "its saved layer is gone")
        if self._root.is_dir():
            for leftover in self._root.iterdir():
                if leftover.name == STAGING:
                    continue
                kept = self._store.sandbox(leftover.name)
                if kept is None or kept.state not in KEPT_STATES:
                    shutil.rmtree(leftover, ignore_errors=True)

    async def reap_expired(self) -> list[str]:
        """Ends every sandbox whose deadline has passed: a running one created with
        ``on_timeout="pause"`` is paused (with its memory, or to disk, as it asked), the rest
        are killed (a paused one at the end of ``limits.paused_retention_s``). Returns the
        ids killed."""
        reaped = []
        for row in self._store.expired_sandboxes(datetime.now(UTC)):
            if row.state == SandboxState.RESUMING:
                continue  # booting under its lock; it gets a new deadline
            if row.state == SandboxState.RUNNING and row.on_timeout == "pause":
                try:
                    await self._auto_pause(row.id)
                except SandgateError as exc:  # retried at the next tick
                    log.warning("sandbox.auto_pause_failed", sandbox=row.id, error=exc.message)
                continue
            await self._terminate(row.id, "timeout")
            reaped.append(row.id)
        return reaped

    async def _tick(self) -> None:
        await self.reap_expired()
        now = asyncio.get_running_loop().time()
        if now - self._swept >= _SWEEP_INTERVAL_S:
            self._swept = now
            await self.sweep_exited()

    def suspect(self, sandbox_id: str) -> None:
        """A connection to the guest could not be opened: check (once at a time) whether the
        sandbox still exists, so its state stays truthful."""
        if sandbox_id in self._suspects:
            return
        task = asyncio.create_task(self.check_exited(sandbox_id), name=f"check-{sandbox_id}")
        self._suspects[sandbox_id] = task
        task.add_done_callback(lambda _: self._suspects.pop(sandbox_id, None))

    async def check_exited(self, sandbox_id: str) -> None:
        """Kills a running sandbox whose runtime sandbox is gone and whose guest is silent."""
        row = self._store.sandbox(sandbox_id)
        if row is None or row.state != SandboxState.RUNNING.value:
            return
        try:
            pid = await self._runtime.pid(sandbox_id)
        except SandgateError:
            return  # the runtime is unreachable: nothing can be said about the sandbox
        if pid is None and not await self._alive(sandbox_id):
            try:
                await self._terminate(
                    sandbox_id, "its sandbox stopped on its own (the guest exited)"
                )
            except SandgateError as exc:  # killed meanwhile by someone else: nothing to do
                log.info("sandbox.exit_check_skipped", sandbox=sandbox_id, error=exc.message)

    async def sweep_exited(self) -> None:
        """Removes running sandboxes whose runtime sandbox is gone (a guest killed by the
        kernel, say): the store says ``running`` only while the sandbox exists."""
        found = {s.sandbox_id: s.state for s in await self._runtime.list()}
        settled = datetime.now(UTC) - timedelta(seconds=_SWEEP_GRACE_S)
        for row in self._store.live_sandboxes():
            if (
                row.state == SandboxState.RUNNING.value
                and row.runtime == self._runtime.name
                and row.started_at < settled
                and found.get(row.id, RuntimeState.GONE) is RuntimeState.GONE
            ):
                await self.check_exited(row.id)
