"""Sandbox lifecycle: create, connect, list, time out, pause, save, fork, kill, and find them
again after a crash.

The store is the source of truth for what exists and who owns it; the runtime is asked only
to start, stop, freeze, save a layer and enumerate. Every public method checks ownership: a
team sees and touches only its own sandboxes, and a sandbox that belongs to another team is
reported exactly like one that does not exist. Saved disks (snapshots, sandboxes paused to
disk, fork captures) are ``snapshots.SnapshotService``'s; the moves between states are
``state.py``'s table; sandboxes started ahead of demand are ``pool.WarmPool``'s, and when to
end, sweep or re-adopt a sandbox is ``reaper.Reaper``'s (the moves themselves stay here).
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import re
import shutil
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from functools import partial
from pathlib import Path
from typing import Any

import structlog

from sandgate._tasks import wait_quietly
from sandgate.access import Principal, new_access_token, traffic_token
from sandgate.config import Config
from sandgate.errors import (
    Conflict,
    DiskFull,
    InvalidRequest,
    LimitExceeded,
    QuotaExceeded,
    SandboxNotFound,
    SandboxUnavailable,
    SandgateError,
    SnapshotDamaged,
    TemplateNotFound,
)
from sandgate.guest.client import Ended, GuestClient, GuestError, Output
from sandgate.guest.protocol import EGRESS_PROXY_PORT
from sandgate.observability import tracing
from sandgate.runtimes import GUEST_ARCHIVE, Runtime, SandboxSpec, VolumeMount, sandbox_seeds
from sandgate.runtimes._tmpfs import mount_runtime_dirs
from sandgate.sandboxes.catalog import resolve
from sandgate.sandboxes.hooks import LifecycleObserver, NetworkUpdater, SandboxHook, VolumeLender
from sandgate.sandboxes.pool import WarmPool, default_size, new_sandbox_id
from sandgate.sandboxes.publish import make_host_dir, publish_file
from sandgate.sandboxes.reaper import Reaper
from sandgate.sandboxes.snapshots import SnapshotName, SnapshotService
from sandgate.sandboxes.state import SandboxState, SnapshotKind, check_transition
from sandgate.store import (
    KEPT_STATES,
    Sandbox,
    SandboxPage,
    Snapshot,
    Store,
    Template,
)

__all__ = ["CreateRequest", "Route", "SandboxService"]

log = structlog.get_logger("sandgate.sandboxes")

_READY_TIMEOUT_S = 30.0
_SERVICE_READY_TIMEOUT_S = 60.0
#: How long one readiness request lets the guest keep trying a template's ready port.
_READY_PORT_STEP_S = 1.0
#: E2B's ``wait_for_port(p)`` ready command; answered through the guest's port tunnel, so the
#: image needs no ``ss``.
_WAIT_FOR_PORT = re.compile(r'\[ -n "\$\(ss -Htuln sport = :([1-9][0-9]{0,4})\)" \]')
#: Characters of a command line kept in its audit record (the rest is only hashed).
_PREVIEW = 200
#: Sandboxes one fork call may start (E2B's SDKs allow 1..20), and how many boot at once.
MAX_FORK_COUNT = 20
#: E2B's refresh: the least a refresh extends a sandbox's life by (its default), the most
#: one may ask for.
REFRESH_MIN_S = 15
REFRESH_MAX_S = 3600
_FORK_PARALLEL = 4

AuditSink = Callable[[dict[str, Any]], Awaitable[object]]


@dataclass(frozen=True)
class CreateRequest:
    template: str
    timeout_s: int | None
    metadata: dict[str, str]
    envs: dict[str, str]
    cpu_count: int | None = None
    memory_mb: int | None = None
    allow_internet_access: bool = False
    #: The caller's ``network`` options: egress (``allow_out``/``deny_out``, which the egress
    #: hook checks against ``egress.api_allow_out``; ``rules``, header rules that may use team
    #: secrets) and ``allow_public_traffic`` (ports that need no traffic token).
    network: dict[str, Any] | None = None
    #: Team volumes to mount, ``[{"name", "path"}]`` (E2B ``volumeMounts``).
    volume_mounts: tuple[dict[str, str], ...] = ()
    #: E2B ``lifecycle``: what the reaper does at the deadline ("kill" or "pause"), whether
    #: that pause keeps memory, and whether a paused sandbox wakes on traffic.
    on_timeout: str = "kill"
    auto_pause_memory: bool = True
    auto_resume: bool = False


@dataclass(frozen=True)
class Route:
    """Where data-plane traffic for one sandbox goes, and the token it must carry."""

    sandbox_id: str
    access_token: str
    guest: GuestClient
    #: The sandbox's row when the route was made: its id, team and key never change, so
    #: per-request records (``record_command``) need no store read on the event loop.
    row: Sandbox
    #: Needed (``E2B-Traffic-Access-Token``) on ports other than envd's; None: public ports.
    traffic_token: str | None = None
    #: Per-sandbox gateway state that lives as long as the route (e.g. polling watchers).
    state: dict[str, Any] = field(default_factory=dict)


class SandboxService:
    def __init__(
        self,
        config: Config,
        store: Store,
        runtime: Runtime,
        *,
        instance_id: str,
        guest_zipapp: Path,
        hooks: Sequence[SandboxHook] = (),
        audit: AuditSink | None = None,
        network: NetworkUpdater | None = None,
        volumes: VolumeLender | None = None,
        observers: Sequence[LifecycleObserver] = (),
    ) -> None:
        """``network`` serves ``update_network`` (the egress hook); ``volumes`` lends team
        volumes to creates that ask for them. Without either, those requests are refused."""
        self._network = network
        self._volumes = volumes
        self._config = config
        self._limits = config.limits
        self._store = store
        self._runtime = runtime
        self._instance_id = instance_id
        self._guest_zipapp = guest_zipapp
        self._hooks = list(hooks)
        self._audit = audit
        self._observers = list(observers)
        #: Told of each create's template (``-`` if none resolved), outcome (``ok`` or the
        #: error code) and seconds (the metrics); must be quick and must not raise.
        self.on_create: Callable[[str, str, float], None] | None = None
        self._pending_audit: set[asyncio.Task[None]] = set()
        self._root = config.home_dir / "sandboxes"
        self._routes: dict[str, Route] = {}
        self._admission = asyncio.Lock()
        self._locks: dict[str, asyncio.Lock] = {}
        self._snapshots = SnapshotService(config, store, runtime)
        self._pool = WarmPool(
            config,
            runtime,
            self._root,
            boot=self._boot_warm,
            alive=self._guest_alive,
            discard=self._discard,
        )
        self._reaper = Reaper(
            store,
            runtime,
            self._snapshots,
            self._root,
            terminate=self._terminate_for,
            auto_pause=self._auto_pause,
            alive=self._guest_alive,
            adopt=self._adopt,
        )

    @property
    def runtime(self) -> Runtime:
        return self._runtime

    @property
    def snapshots(self) -> SnapshotService:
        return self._snapshots

    # -- lifecycle ------------------------------------------------------------------------

    async def create(
        self, principal: Principal, request: CreateRequest, *, source: Snapshot | None = None
    ) -> Sandbox:
        """Starts a sandbox and returns its row once the guest answers. ``request.template``
        names a template or one of the team's snapshots (its files, template and envVars;
        ``request.envs`` are added); ``source`` gives a save directly (a fork's capture).

        Raises ``TemplateNotFound``, ``LimitExceeded`` (a value beyond a configured cap),
        ``QuotaExceeded`` (too many sandboxes), ``NotFound``/``InvalidRequest`` (a volume to
        mount), ``DiskFull`` (a snapshot bigger than the sandbox's disk),
        ``RuntimeUnavailable``. On any failure nothing is left behind: no row, no container,
        no directory.
        """
        started = time.monotonic()
        resolved: list[str] = []  # the template's name once known: the metrics' label
        outcome = "ok"
        with tracing.span("sandbox.create", template=str(request.template)[:200]) as span:
            try:
                row = await self._create_checked(principal, request, source, resolved)
                span.set(sandbox__id=row.id)
                return row
            except SandgateError as exc:
                outcome = exc.code
                raise
            except asyncio.CancelledError:
                outcome = "cancelled"
                raise
            except BaseException:
                outcome = "internal"
                raise
            finally:
                if self.on_create is not None:
                    label = resolved[0] if resolved else "-"
                    self.on_create(label, outcome, time.monotonic() - started)

    async def _create_checked(
        self,
        principal: Principal,
        request: CreateRequest,
        source: Snapshot | None,
        resolved: list[str],
    ) -> Sandbox:
        _check_lifecycle(request)
        if source is None:
            source = self._snapshots.resolve(principal.team_id, request.template)
        timeout_s = self._check_timeout(request.timeout_s)
        if source is not None:
            template = self._store.template_by_name_or_id(source.template_id)
            if template is None:
                raise TemplateNotFound(
                    f"snapshot '{request.template}' was taken from a template that no longer "
                    "exists; rebuild it or delete the snapshot"
                )
        else:
            template = resolve(self._store, principal.team_id, request.template)
        if template is None:
            raise TemplateNotFound(
                f"template '{request.template}' not found: build it (E2B `Template.build`, "
                f"`e2b template create`, or `sandgate templates build` for the shipped ones); "
                "`e2b template list` shows what your team can use"
            )
        default_cpu, default_memory = default_size(source or template, self._limits)
        cpu = self._check_range(
            "cpuCount",
            request.cpu_count,
            default_cpu,
            1,
            self._limits.max_cpu_count,
            "limits.max_cpu_count",
        )
        memory = self._check_range(
            "memoryMB",
            request.memory_mb,
            default_memory,
            64,
            self._limits.max_memory_mb,
            "limits.max_memory_mb",
        )
        resolved.append(template.name)
        mounts = await self._claim_volumes(principal.team_id, request.volume_mounts)
        try:
            return await self._create(
                principal, request, template, source, timeout_s, cpu, memory, mounts
            )
        finally:
            if mounts and self._volumes is not None:
                self._volumes.release(mounts)

    async def _claim_volumes(
        self, team_id: str, wanted: Sequence[dict[str, str]]
    ) -> tuple[VolumeMount, ...]:
        if not wanted:
            return ()
        if self._volumes is None:
            raise InvalidRequest("volumeMounts: this server has no volumes")
        return await self._volumes.claim(team_id, wanted)

    async def _create(
        self,
        principal: Principal,
        request: CreateRequest,
        template: Template,
        source: Snapshot | None,
        timeout_s: int,
        cpu: int,
        memory: int,
        mounts: tuple[VolumeMount, ...],
    ) -> Sandbox:
        layer: Path | None = None
        saved_envs: dict[str, str] = {}
        if source is not None:
            layer = self._snapshots.archive(source)
            saved_envs = self._snapshots.envs_in(source)
        image_ref = source.image_ref if source is not None else template.image_ref
        now = datetime.now(UTC)
        # A warm sandbox has no volumes and no saved files: such a create boots its own.
        fresh = bool(mounts) or source is not None
        warm = None if fresh else await self._pool.take(template, cpu, memory)
        row = Sandbox(
            id=warm.sandbox_id if warm is not None else new_sandbox_id(),
            team_id=principal.team_id,
            api_key_id=principal.api_key_id,
            template_id=template.id,
            alias=template.display_name,
            state=SandboxState.STARTING.value,
            runtime=self._runtime.name,
            runtime_ref=warm.ref if warm is not None else None,
            access_token=new_access_token(),
            metadata_=dict(request.metadata),
            cpu_count=cpu,
            memory_mb=memory,
            disk_size_mb=self._limits.disk_mib,
            envd_version=template.envd_version,
            allow_internet_access=request.allow_internet_access,
            network=request.network,
            volume_mounts=[
                {"name": m.name, "path": m.target, "volume_id": m.volume_id} for m in mounts
            ]
            or None,
            started_at=now,
            end_at=now + timedelta(seconds=timeout_s),
            ended_at=None,
            image_ref=image_ref,
            timeout_s=timeout_s,
            on_timeout=request.on_timeout,
            auto_pause_memory=request.auto_pause_memory,
            auto_resume=request.auto_resume,
        )
        user_envs = {**saved_envs, **request.envs}
        try:
            async with self._admission:
                self._check_quotas(principal.team_id)
                self._store.add_sandbox(row)
        except BaseException:
            if warm is not None:
                self._pool.put_back(template, warm)
            raise
        host_dir = self._root / row.id
        try:
            self._snapshots.remember_envs(row.id, user_envs)
            if warm is not None:
                extra_envs = await self._attach(row, host_dir)
                envs = {**(template.envs or {}), **extra_envs, **user_envs}
                await self._guest(row.id).configure(envs)
                _publish_envs(host_dir, envs)
                ref = warm.ref
            else:
                make_host_dir(host_dir)
                ref = await self._boot(
                    row.id,
                    template,
                    cpu,
                    memory,
                    user_envs,
                    mounts,
                    image_ref=image_ref,
                    layer=layer,
                    attach=partial(self._attach, row, host_dir),
                    attach_envs=self._boot_envs(row),
                )
        except BaseException:
            await self._discard(row.id)
            raise
        if not self._store.start_sandbox(row, ref, now):
            raise _not_found(row.id)
        self._routes[row.id] = self._route_of(row)
        snapshot_id = source.id if source is not None else None
        await self._record(
            "sandbox.created",
            row,
            template=template.name,
            warm=warm is not None,
            snapshot=snapshot_id,
        )
        log.info(
            "sandbox.created",
            sandbox=row.id,
            template=template.name,
            team=row.team_id,
            warm=warm is not None,
            snapshot=snapshot_id,
        )
        return row

    async def _attach(self, row: Sandbox, host_dir: Path) -> dict[str, str]:
        """Every hook at once (each waits on its own socket and audit record, and a create
        waits for the slowest, not the sum); their variables merge in hook order. Returns or
        raises only once every hook has finished, so a failed create's detach never races
        an attach still under way."""
        results = await asyncio.gather(
            *(hook.attach(row, host_dir) for hook in self._hooks), return_exceptions=True
        )
        extra_envs: dict[str, str] = {}
        for result in results:
            if isinstance(result, BaseException):
                raise result
            extra_envs.update(result)
        return extra_envs

    def _boot_envs(self, row: Sandbox) -> dict[str, str]:
        """The variables the hooks' ``attach`` will give ``row``, as far as each knows them
        before it runs (``SandboxHook.boot_env``), merged in hook order as ``_attach`` does."""
        envs: dict[str, str] = {}
        for hook in self._hooks:
            envs.update(hook.boot_env(row))
        return envs

    async def _boot(
        self,
        sandbox_id: str,
        template: Template,
        cpu: int,
        memory: int,
        envs: dict[str, str],
        volumes: tuple[VolumeMount, ...] = (),
        *,
        image_ref: str | None = None,
        layer: Path | None = None,
        attach: Callable[[], Awaitable[dict[str, str]]] | None = None,
        attach_envs: Mapping[str, str] | None = None,
    ) -> str:
        """Starts a sandbox's container in an existing host directory and waits until its
        guest (and the template's service) answers; returns the runtime reference. ``layer``
        is a saved layer its disk starts as; ``image_ref`` the image it was saved over.

        ``attach`` (the sandbox's hooks) runs while the guest starts: a guest's start is
        most of a create and leaves the gateway idle, and the hooks' sockets, stubs and
        audit records need nothing of it (attached any earlier, they compete with the
        runtime's own work for the interpreter: no faster, measured). Their variables join
        ``envs`` (below the caller's own) once both are done, before the template's service
        or any command of the caller starts; nothing in the sandbox runs before that. Raises
        only once ``attach`` has ended, so the caller's undoing never races it.

        ``attach_envs``: the variables ``attach`` is expected to return (``_boot_envs``). The
        guest starts with them, and when ``attach`` returns exactly these it is not asked to
        change its environment afterwards: a round trip to the guest (and a file written)
        fewer on most creates. Otherwise it gets what ``attach`` returned, as without them."""
        host_dir = self._root / sandbox_id
        expected = dict(attach_envs or {})
        # File copies and writes: off the event loop, which a burst of creates shares.
        await asyncio.to_thread(
            self._prepare_host_dir,
            host_dir,
            {**(template.envs or {}), **expected, **envs},
            template,
        )
        own_image = image_ref is None or image_ref == template.image_ref
        spec = SandboxSpec(
            sandbox_id=sandbox_id,
            image_ref=image_ref or template.image_ref,
            image_id=template.image_id if own_image else "",
            host_dir=host_dir,
            cpu_count=cpu,
            memory_mb=memory,
            disk_mib=self._limits.disk_mib,
            pids_limit=self._limits.pids_limit,
            nofile=self._limits.nofile,
            max_ptys=self._limits.max_ptys,
            seeds=sandbox_seeds(),
            volumes=volumes,
            layer=layer,
            guest=self._guest_zipapp,
        )
        ref = await self._runtime.create(spec)
        attaching = asyncio.ensure_future(attach()) if attach is not None else None
        try:
            await self._wait_ready(sandbox_id)
            extra_envs = await attaching if attaching is not None else {}
        except BaseException:
            if attaching is not None:
                await wait_quietly(attaching)
            raise
        if extra_envs != expected:
            full = {**(template.envs or {}), **extra_envs, **envs}
            await self._guest(sandbox_id).configure(full)
            _publish_envs(host_dir, full)
        await self._start_template_service(sandbox_id, template)
        return ref

    # -- warm pool ------------------------------------------------------------------------

    def warm_pool_sizes(self) -> dict[str, int]:
        """Started sandboxes waiting in each template's warm pool (the metrics' gauge)."""
        return self._pool.sizes()

    async def warm_pool_filled(self) -> None:
        """Returns once the warm pool's refills under way have ended."""
        await self._pool.wait_filled()

    async def _boot_warm(self, sandbox_id: str, template: Template) -> str:
        """Boots a sandbox for the warm pool: the template's default size, no environment
        of its own."""
        cpu, memory = default_size(template, self._limits)
        return await self._boot(sandbox_id, template, cpu, memory, {})

    async def connect(
        self,
        principal: Principal,
        sandbox_id: str,
        timeout_s: int | None,
        *,
        memory: bool | None = None,
    ) -> tuple[Sandbox, bool]:
        """Returns the sandbox and whether it had to be resumed. A running sandbox's deadline
        is only ever extended here, never shortened. A paused one is resumed first and gets
        ``now + timeout``: thawed (memory kept) or, when it was paused to disk or
        ``memory`` is False (E2B's ``on_resume="reboot"``), cold-booted over its saved
        files with the same id and token. Raises ``QuotaExceeded`` when a cold boot would
        cross the sandbox quotas."""
        row = self.get(principal, sandbox_id)
        timeout = self._check_timeout(timeout_s)
        resumed = False
        if row.state in (SandboxState.PAUSED, SandboxState.STORED, SandboxState.RESUMING):
            async with self._lock(row.id):
                row = self.get(principal, sandbox_id)
                resumed = row.state in (SandboxState.PAUSED, SandboxState.STORED)
                if row.state == SandboxState.PAUSED and memory is False:
                    row = await self._store_to_disk(row)
                if row.state == SandboxState.PAUSED:
                    row = await self._thaw(row, timeout)
                elif row.state == SandboxState.STORED:
                    row = await self._cold_resume(row, timeout)
        if not resumed:
            new_end = max(row.end_at, datetime.now(UTC) + timedelta(seconds=timeout))
            updated = self._store.update_sandbox(row.id, end_at=new_end)
            if updated is None:
                raise _not_found(sandbox_id)
            row = updated
        return row, resumed

    async def pause(
        self,
        principal: Principal,
        sandbox_id: str,
        *,
        memory: bool = True,
        require_healthy_guest: bool = False,
    ) -> None:
        """Pauses an owned running sandbox: frozen with its memory (``memory``), or its files
        saved to disk and its processes and memory freed (resume cold-boots it). Raises
        ``Conflict`` if it is already paused (either way) or still starting, and
        ``SandboxUnavailable`` when ``require_healthy_guest`` and its guest does not answer."""
        async with self._lock(sandbox_id):
            row = self.get(principal, sandbox_id)
            current = SandboxState(row.state)
            if current in (SandboxState.PAUSED, SandboxState.STORED):
                check_transition(row.id, current, current)  # "cannot pause …: it is paused"
            if require_healthy_guest and not await self._guest_alive(row.id):
                raise SandboxUnavailable(
                    f"sandbox {row.id}'s guest does not answer; it was not paused"
                )
            if memory:
                await self._freeze(row)
            else:
                await self._store_to_disk(row)

    async def _freeze(self, row: Sandbox) -> Sandbox:
        """RUNNING → PAUSED (the caller holds the sandbox's lock)."""
        check_transition(row.id, SandboxState(row.state), SandboxState.PAUSED)
        await self._before_stop(row)
        self._routes.pop(row.id, None)
        await self._runtime.pause(row.id)
        paused = self._store.update_sandbox(
            row.id, state=SandboxState.PAUSED.value, end_at=self._paused_until()
        )
        await self._record("sandbox.paused", row, memory=True)
        log.info("sandbox.paused", sandbox=row.id, memory=True)
        return paused or row

    async def _thaw(self, row: Sandbox, timeout_s: int) -> Sandbox:
        """PAUSED → RUNNING with a new deadline (the caller holds the sandbox's lock)."""
        check_transition(row.id, SandboxState.PAUSED, SandboxState.RUNNING)
        await self._runtime.resume(row.id)
        thawed = self._store.update_sandbox(
            row.id,
            state=SandboxState.RUNNING.value,
            end_at=datetime.now(UTC) + timedelta(seconds=timeout_s),
        )
        if thawed is None:
            raise _not_found(row.id)
        await self._record("sandbox.resumed", row, memory=True)
        log.info("sandbox.resumed", sandbox=row.id, memory=True)
        return thawed

    async def _store_to_disk(self, row: Sandbox) -> Sandbox:
        """RUNNING or PAUSED → STORED: saves the layer, then ends the sandbox's processes and
        frees its memory, uid range and disk; its host directory and envVars stay for the
        cold boot (the caller holds the sandbox's lock). On failure the sandbox is as it was."""
        current = SandboxState(row.state)
        check_transition(row.id, current, SandboxState.STORED)
        if current == SandboxState.RUNNING:
            await self._before_stop(row)
        self._routes.pop(row.id, None)
        if current == SandboxState.RUNNING:
            await self._runtime.pause(row.id)
        try:
            await self._snapshots.save(row, SnapshotKind.PAUSE, image_ref=self._image_of(row))
        except BaseException:
            if current == SandboxState.RUNNING:
                with contextlib.suppress(SandgateError):
                    await self._runtime.resume(row.id)
            raise
        stored = self._store.update_sandbox(
            row.id,
            state=SandboxState.STORED.value,
            runtime_ref=None,
            end_at=self._paused_until(),
        )
        try:
            await self._runtime.kill(row.id)
        except SandgateError as exc:  # the next start's reattach removes it
            log.warning("sandbox.store_kill_failed", sandbox=row.id, error=exc.message)
        await self._detach(row.id)
        await self._record("sandbox.paused", row, memory=False)
        log.info("sandbox.paused", sandbox=row.id, memory=False)
        return stored or row

    async def _cold_resume(self, row: Sandbox, timeout_s: int) -> Sandbox:
        """STORED → RESUMING → RUNNING: boots the sandbox again over its saved layer, with its
        id, token, envVars and template image (the caller holds the sandbox's lock). On
        failure it stays paused to disk, as it was."""
        layer = self._snapshots.pause_layer(row.id)
        if layer is None:
            raise SnapshotDamaged(
                f"sandbox {row.id} was paused to disk but its saved layer is gone; kill it"
            )
        template = self._store.template_by_name_or_id(row.template_id)
        if template is None:
            raise TemplateNotFound(
                f"sandbox {row.id} was created from a template that no longer exists"
            )
        check_transition(row.id, SandboxState.STORED, SandboxState.RESUMING)
        async with self._admission:
            self._check_quotas(row.team_id)
            self._store.update_sandbox(row.id, state=SandboxState.RESUMING.value)
        host_dir = self._root / row.id
        mounts: tuple[VolumeMount, ...] = ()
        try:
            # Its volumes are mounted again (a volume deleted meanwhile: NotFound, still paused).
            wanted = [{"name": m["name"], "path": m["path"]} for m in row.volume_mounts or []]
            mounts = await self._claim_volumes(row.team_id, wanted)
            make_host_dir(host_dir, exist_ok=True)
            ref = await self._boot(
                row.id,
                template,
                row.cpu_count,
                row.memory_mb,
                self._snapshots.envs_in(layer),
                mounts,
                image_ref=layer.image_ref,
                layer=self._snapshots.archive(layer),
                attach=partial(self._attach, row, host_dir),
                attach_envs=self._boot_envs(row),
            )
            now = self._store.sandbox(row.id)
            if now is None or now.state != SandboxState.RESUMING:
                raise _not_found(row.id)  # killed while it booted
        except BaseException:
            if mounts and self._volumes is not None:
                self._volumes.release(mounts)
            with contextlib.suppress(SandgateError):
                await self._runtime.kill(row.id)
            await self._detach(row.id)
            now = self._store.sandbox(row.id)
            if now is not None and now.state == SandboxState.RESUMING:
                self._store.update_sandbox(row.id, state=SandboxState.STORED.value)
            raise
        check_transition(row.id, SandboxState.RESUMING, SandboxState.RUNNING)
        resumed = self._store.update_sandbox(
            row.id,
            state=SandboxState.RUNNING.value,
            runtime_ref=ref,
            end_at=datetime.now(UTC) + timedelta(seconds=timeout_s),
        )
        if mounts and self._volumes is not None:
            self._volumes.release(mounts)  # the row names the volumes again
        if resumed is None:
            raise _not_found(row.id)
        await self._snapshots.remove(layer)
        self._routes[row.id] = self._route_of(resumed)
        await self._record("sandbox.resumed", row, memory=False)
        log.info("sandbox.resumed", sandbox=row.id, memory=False)
        return resumed

    def _paused_until(self) -> datetime:
        return datetime.now(UTC) + timedelta(seconds=self._limits.paused_retention_s)

    def _image_of(self, row: Sandbox) -> str:
        """The image a sandbox's root is a layer over (its template's current one for
        sandboxes created before that was recorded)."""
        if row.image_ref:
            return row.image_ref
        template = self._store.template_by_name_or_id(row.template_id)
        if template is None:
            raise TemplateNotFound(f"sandbox {row.id}'s template no longer exists")
        return template.image_ref

    # -- snapshots and forks --------------------------------------------------------------

    async def snapshot(
        self, principal: Principal, sandbox_id: str, name: str | None = None
    ) -> Snapshot:
        """Saves an owned sandbox's files as a snapshot (the sandbox is frozen meanwhile and
        then left as it was; memory is not saved). A second snapshot with the same name
        replaces the first. Raises ``InvalidRequest`` (bad name), ``Conflict`` (the name is a
        template's, or the sandbox is starting), ``QuotaExceeded``, ``DiskFull``."""
        parsed = SnapshotName.parse(name) if name is not None else None
        if parsed is not None and self._store.template_by_name_or_id(parsed.name) is not None:
            raise Conflict(f"a template is named '{parsed.name}': give the snapshot another name")
        return await self._capture(principal, sandbox_id, SnapshotKind.SNAPSHOT, parsed)

    async def fork(
        self, principal: Principal, sandbox_id: str, *, count: int, timeout_s: int | None
    ) -> list[Sandbox | SandgateError]:
        """Saves an owned sandbox's files once and starts ``count`` sandboxes over them (its
        template, envVars, metadata, network and lifecycle; fresh processes). The source is
        frozen meanwhile and left as it was. Each fork succeeds or fails on its own: the
        result has one entry per fork, a sandbox or the error that stopped it."""
        if not 1 <= count <= MAX_FORK_COUNT:
            raise InvalidRequest(f"count must be between 1 and {MAX_FORK_COUNT}; got {count}")
        timeout = self._check_timeout(timeout_s)
        source = self.get(principal, sandbox_id)
        request = CreateRequest(
            template=source.template_id,
            timeout_s=timeout,
            metadata=dict(source.metadata_),
            envs={},
            cpu_count=source.cpu_count,
            memory_mb=source.memory_mb,
            allow_internet_access=source.allow_internet_access,
            network=source.network,
            on_timeout=source.on_timeout,
            auto_pause_memory=source.auto_pause_memory,
            auto_resume=source.auto_resume,
        )
        gate = asyncio.Semaphore(_FORK_PARALLEL)
        capture = await self._capture(principal, sandbox_id, SnapshotKind.FORK, None)

        async def one() -> Sandbox | SandgateError:
            async with gate:
                try:
                    return await self.create(principal, request, source=capture)
                except SandgateError as exc:
                    return exc

        try:
            results = list(await asyncio.gather(*(one() for _ in range(count))))
        finally:
            await self._snapshots.remove(capture)
        await self._record(
            "sandbox.forked",
            source,
            forks=[r.id for r in results if isinstance(r, Sandbox)],
            failed=sum(1 for r in results if not isinstance(r, Sandbox)),
        )
        return results

    async def _capture(
        self,
        principal: Principal,
        sandbox_id: str,
        kind: SnapshotKind,
        name: SnapshotName | None,
    ) -> Snapshot:
        """Saves the sandbox's layer under its lock: a running sandbox is frozen for the copy
        and thawed after, a paused one stays frozen, one paused to disk is saved from its
        saved layer."""
        async with self._lock(sandbox_id):
            row = self.get(principal, sandbox_id)
            state = SandboxState(row.state)
            if state == SandboxState.STARTING:
                raise Conflict(f"cannot save sandbox {row.id}: it is still starting")
            image_ref = self._image_of(row)
            if state == SandboxState.STORED:
                layer = self._snapshots.pause_layer(row.id)
                if layer is None:
                    raise SnapshotDamaged(f"sandbox {row.id}'s saved layer is gone; kill it")
                saved = await self._snapshots.save(
                    row, kind, image_ref=layer.image_ref, name=name, from_layer=layer
                )
            elif state == SandboxState.PAUSED:
                saved = await self._snapshots.save(row, kind, image_ref=image_ref, name=name)
            else:
                await self._runtime.pause(row.id)
                try:
                    saved = await self._snapshots.save(row, kind, image_ref=image_ref, name=name)
                finally:
                    await self._runtime.resume(row.id)
        if kind == SnapshotKind.SNAPSHOT:
            snapshot_id, _ = self._snapshots.describe(saved)
            await self._record(
                "sandbox.snapshot", row, snapshot=snapshot_id, bytes=saved.size_bytes
            )
        return saved

    def record_command(
        self, sandbox_id: str, *, cmd: str, args: Sequence[str], user: str | None, pid: int
    ) -> None:
        """Audits a started process without delaying it: the record is written (and fsynced)
        in the background; ``stop`` waits for records still being written."""
        if self._audit is None and not self._observers:
            return
        route = self._routes.get(sandbox_id)
        row = route.row if route is not None else self._store.sandbox(sandbox_id)
        if row is None:
            return
        text = " ".join([cmd, *args])
        task = asyncio.create_task(
            self._record(
                "command.started",
                row,
                cmd=cmd,
                user=user or "default",
                pid=pid,
                command_preview=text[:_PREVIEW],
                command_sha256=_sha256(text),
            )
        )
        self._pending_audit.add(task)
        task.add_done_callback(self._pending_audit.discard)

    async def _record(self, event: str, row: Sandbox, **detail: Any) -> None:
        """One audit record of a sandbox event; a failure to write it is logged, not raised:
        the lifecycle action has already happened and must not be reported as failed.
        Observers (telemetry) hear of it too, while the audit writer makes the record durable
        (both wait on other threads, and every create, pause and kill waits for both)."""
        audit: asyncio.Future[object] | None = None
        if self._audit is not None:
            record = {
                "event": event,
                "sandbox": row.id,
                "subject": {"team": row.team_id, "api_key": row.api_key_id},
                "outcome": "ok",
                "detail": detail,
            }
            try:
                audit = asyncio.ensure_future(self._audit(record))
            except SandgateError as exc:  # a sink that refuses at once (a tampered log)
                log.error("audit.write_failed", event=event, sandbox=row.id, error=exc.message)
        try:
            for observer in self._observers:
                await observer.on_event(event, row, detail)
        finally:
            if audit is not None:
                try:
                    await audit
                except SandgateError as exc:
                    log.error("audit.write_failed", event=event, sandbox=row.id, error=exc.message)

    async def _before_stop(self, row: Sandbox) -> None:
        for observer in self._observers:
            await observer.before_stop(row)

    def _lock(self, sandbox_id: str) -> asyncio.Lock:
        return self._locks.setdefault(sandbox_id, asyncio.Lock())

    def get(self, principal: Principal, sandbox_id: str) -> Sandbox:
        row = self._store.sandbox(sandbox_id)
        if row is None or row.team_id != principal.team_id or row.state not in KEPT_STATES:
            raise _not_found(sandbox_id)
        return row

    def list_sandboxes(
        self,
        principal: Principal,
        *,
        states: list[str],
        metadata: dict[str, str],
        limit: int,
        next_token: str | None,
    ) -> SandboxPage:
        after = _parse_token(next_token) if next_token else None
        if SandboxState.PAUSED in states:  # E2B's "paused" is every kind of paused
            states = [*states, SandboxState.STORED.value, SandboxState.RESUMING.value]
        return self._store.list_sandboxes(principal.team_id, states, metadata, limit, after)

    def set_timeout(self, principal: Principal, sandbox_id: str, timeout_s: int) -> None:
        """Sets ``end_at = now + timeout``, which may shorten the sandbox's life."""
        row = self.get(principal, sandbox_id)
        timeout = self._check_timeout(timeout_s)
        self._store.update_sandbox(row.id, end_at=datetime.now(UTC) + timedelta(seconds=timeout))

    async def change_timeout(self, principal: Principal, sandbox_id: str, timeout_s: int) -> None:
        """``set_timeout`` for API callers: the same, plus an audit record
        (``sandbox.timeout_set``) of who moved the sandbox's end and to when."""
        self.set_timeout(principal, sandbox_id, timeout_s)
        row = self.get(principal, sandbox_id)
        await self._record(
            "sandbox.timeout_set", row, timeout_s=timeout_s, end_at=row.end_at.isoformat()
        )

    async def refresh(self, principal: Principal, sandbox_id: str, duration_s: int | None) -> None:
        """E2B's refresh (keep-alive): the sandbox lives at least ``duration_s`` more seconds
        (omitted or shorter: :data:`REFRESH_MIN_S`, E2B's floor), and never less than it
        already would, unlike ``set_timeout``. Audited as ``sandbox.refreshed``.

        Raises ``SandboxNotFound`` (unknown, ended, another team's), ``InvalidRequest``
        (negative, or over E2B's cap :data:`REFRESH_MAX_S`) and ``LimitExceeded`` (over
        ``limits.max_timeout_s``)."""
        if duration_s is not None and not 0 <= duration_s <= REFRESH_MAX_S:
            raise InvalidRequest(
                f"duration must be between 0 and {REFRESH_MAX_S} seconds; got {duration_s}"
            )
        row = self.get(principal, sandbox_id)
        duration = self._check_timeout(max(duration_s or 0, REFRESH_MIN_S))
        async with self._lock(row.id):
            row = self.get(principal, sandbox_id)
            end_at = max(row.end_at, datetime.now(UTC) + timedelta(seconds=duration))
            if end_at != row.end_at:
                self._store.update_sandbox(row.id, end_at=end_at)
        await self._record("sandbox.refreshed", row, duration_s=duration, end_at=end_at.isoformat())

    async def configure_guest(
        self,
        sandbox_id: str,
        *,
        envs: Mapping[str, str],
        default_user: str | None,
        default_workdir: str | None,
    ) -> None:
        """envd's ``/init`` for a running sandbox (the caller holds its access token):
        ``envs`` are added to the sandbox-level environment (and to ``envs.json``, where
        services inside read it, as ``update_network`` does); ``default_user`` and
        ``default_workdir`` replace the guest's for processes started from now on. Raises
        ``SandboxNotFound``, ``GuestError`` (``invalid_argument``; ``unauthenticated``: no
        such user in the sandbox)."""
        row = self._store.sandbox(sandbox_id)
        if row is None or row.state != SandboxState.RUNNING.value:
            raise _not_found(sandbox_id)
        host_dir = self._root / row.id
        try:
            current = json.loads((host_dir / "envs.json").read_text())
        except (OSError, ValueError):
            current = {}
        merged = {**(current if isinstance(current, dict) else {}), **envs}
        await self._guest(row.id).configure(
            merged, default_user=default_user, default_workdir=default_workdir
        )
        if merged != current:
            _publish_envs(host_dir, merged)

    async def update_network(
        self,
        principal: Principal,
        sandbox_id: str,
        *,
        network: dict[str, Any],
        allow_internet_access: bool,
    ) -> Sandbox:
        """Replaces a running sandbox's egress options (E2B's ``update_network``: ``network``
        holds ``allow_out``, ``deny_out`` and ``rules``, each empty when the call omitted it;
        ``allow_public_traffic`` is not egress and stays, as does the ``iam`` registration).
        The new policy applies to new connections at once and cuts open ones it refuses;
        audited by the egress hook.

        Raises ``SandboxNotFound``, ``Conflict`` (the sandbox is paused or still starting:
        resume it first), ``InvalidRequest`` (more than ``egress.api_allow_out`` permits, or a
        rule names a missing team secret; nothing changes then)."""
        if self._network is None:
            raise InvalidRequest("this server does not update sandbox networks")
        async with self._lock(sandbox_id):
            row = self.get(principal, sandbox_id)
            if row.state != SandboxState.RUNNING.value:
                raise Conflict(
                    f"cannot update the network of sandbox {sandbox_id}: it is {row.state}; "
                    "connect to it (resume) first"
                )
            # The iam registration is the create call's: update rules may use its names.
            kept = {
                k: v for k, v in (row.network or {}).items() if k in ("allow_public_traffic", "iam")
            }
            # The row is detached: these assignments change nothing stored until update below.
            row.network = {**kept, **network}
            row.allow_internet_access = allow_internet_access
            self._network.check_network(row)
            updated = self._store.update_sandbox(
                row.id, network=row.network, allow_internet_access=allow_internet_access
            )
            if updated is None:
                raise _not_found(sandbox_id)
            host_dir = self._root / row.id
            extra = await self._network.update_network(updated, host_dir)
            await self._add_envs(updated.id, host_dir, extra)
            return updated

    async def _add_envs(self, sandbox_id: str, host_dir: Path, extra: Mapping[str, str]) -> None:
        """Adds ``extra`` to a running sandbox's environment for processes started from now
        on (the guest's and ``envs.json``); no-op when they are there already."""
        try:
            current = json.loads((host_dir / "envs.json").read_text())
        except (OSError, ValueError):
            current = {}
        if not isinstance(current, dict) or all(current.get(k) == v for k, v in extra.items()):
            return
        envs = {**current, **extra}
        await self._guest(sandbox_id).configure(envs)
        _publish_envs(host_dir, envs)

    async def kill(self, principal: Principal, sandbox_id: str) -> None:
        """Kills an owned, live sandbox; raises ``SandboxNotFound`` otherwise."""
        row = self.get(principal, sandbox_id)
        await self._terminate(row.id, reason="killed")

    async def kill_any(self, sandbox_id: str) -> bool:
        """Administrative kill (CLI, reaper): no ownership check. Returns whether it existed."""
        row = self._store.sandbox(sandbox_id)
        if row is None or row.state not in KEPT_STATES:
            return False
        await self._terminate(sandbox_id, reason="killed by operator")
        return True

    # -- data plane -----------------------------------------------------------------------

    def route(self, sandbox_id: str) -> Route | None:
        """The data-plane route of a live sandbox, or None (reported as 502 by the caller)."""
        route = self._routes.get(sandbox_id)
        if route is not None:
            return route
        row = self._store.sandbox(sandbox_id)
        if row is None or row.state != SandboxState.RUNNING.value:
            return None
        route = self._route_of(row)
        self._routes[row.id] = route
        return route

    def wakeable(self, sandbox_id: str) -> Route | None:
        """The route a paused, ``auto_resume`` sandbox will have, for checking a request's
        token *before* waking it (see ``wake``); None for any other sandbox."""
        row = self._store.sandbox(sandbox_id)
        if row is None or row.state != SandboxState.PAUSED or not row.auto_resume:
            return None
        return self._route_of(row)

    async def wake(self, sandbox_id: str) -> Route | None:
        """Resumes a paused ``auto_resume`` sandbox for a data-plane request that carried its
        token (E2B's auto-resume: the next request wakes it), with its creating timeout
        again; returns its route, or None if it cannot be woken. Only a sandbox paused with
        its memory wakes on traffic, as on E2B: one paused to disk needs ``connect``."""
        async with self._lock(sandbox_id):
            row = self._store.sandbox(sandbox_id)
            if row is not None and row.state == SandboxState.PAUSED and row.auto_resume:
                timeout = row.timeout_s or self._limits.default_timeout_s
                try:
                    await self._thaw(row, timeout)
                except SandgateError as exc:
                    log.warning("sandbox.wake_failed", sandbox=sandbox_id, error=exc.message)
                    return None
        return self.route(sandbox_id)

    def _route_of(self, row: Sandbox) -> Route:
        public = bool((row.network or {}).get("allow_public_traffic"))
        token = None if public else traffic_token(row.access_token)
        return Route(row.id, row.access_token, self._guest(row.id), row, traffic_token=token)

    def route_by_signature(self, match: Any) -> Route | None:
        """The route whose access token satisfies ``match(token)``; used by signed URLs
        that carry no routing information."""
        for route in list(self._routes.values()):
            if match(route.access_token):
                return route
        return None

    # -- background work ------------------------------------------------------------------

    async def start(self) -> None:
        """Puts the sandboxes' runtime files on a tmpfs (``runtime.tmpfs``), checks the
        runtime (so a problem shows at start, not at the first create; Docker's shim is
        installed here), reattaches to sandboxes that survived a gateway restart, then starts
        the reaper."""
        if self._config.runtime.tmpfs:
            mounted = await asyncio.to_thread(mount_runtime_dirs, self._config.home_dir)
            for path, outcome in mounted.items():
                log.info("runtime_dir.tmpfs", path=path, outcome=outcome)
        try:
            version = await self._runtime.ping()
            log.info("runtime.ready", runtime=self._runtime.name, version=version)
        except SandgateError as exc:
            log.error("runtime.unavailable", runtime=self._runtime.name, error=exc.message)
        await self._snapshots.recover()
        await self.reattach()
        self._reaper.start()
        templates = self._config.templates
        for name in templates.warm_pool:
            template = self._store.template_by_name_or_id(name)
            if template is None:
                # The default pool (the code interpreter) waits quietly for its template.
                if "warm_pool" in templates.model_fields_set:
                    log.warning("pool.unknown_template", template=name)
                continue
            self._pool.refill(template)
        self._pool.start()

    async def stop(self) -> None:
        """Stops background work. Sandboxes keep running; the next start reattaches them."""
        await self._reaper.stop()
        await self._pool.drain()
        if self._pending_audit:
            await asyncio.gather(*self._pending_audit, return_exceptions=True)

    async def reattach(self) -> None:
        """Adopts the runtime's sandboxes that are still wanted; removes the rest
        (``reaper.Reaper.reattach``)."""
        await self._reaper.reattach()

    async def reap_expired(self) -> list[str]:
        """Ends every sandbox whose deadline has passed; returns the ids killed
        (``reaper.Reaper.reap_expired``)."""
        return await self._reaper.reap_expired()

    async def sweep_exited(self) -> None:
        """Removes running sandboxes whose runtime sandbox is gone (``reaper.Reaper``)."""
        await self._reaper.sweep_exited()

    async def _adopt(self, row: Sandbox) -> None:
        """Makes a sandbox found running after a restart reachable again."""
        self._routes[row.id] = self._route_of(row)
        for hook in self._hooks:
            await hook.attach(row, self._root / row.id)

    async def _auto_pause(self, sandbox_id: str) -> None:
        """The reaper's pause (E2B ``lifecycle.on_timeout="pause"``). A pause to disk that the
        team's disk quota or the gateway's disk refuses falls back to keeping memory: the
        sandbox's files are never dropped for want of space."""
        async with self._lock(sandbox_id):
            row = self._store.sandbox(sandbox_id)
            if row is None or row.state != SandboxState.RUNNING or row.end_at > datetime.now(UTC):
                return
            if not row.auto_pause_memory:
                try:
                    await self._store_to_disk(row)
                    return
                except (QuotaExceeded, DiskFull) as exc:
                    log.warning("sandbox.auto_pause_kept_memory", sandbox=row.id, why=exc.message)
            await self._freeze(row)

    # -- helpers --------------------------------------------------------------------------

    async def _terminate_for(self, sandbox_id: str, reason: str) -> None:
        await self._terminate(sandbox_id, reason=reason)

    async def _terminate(self, sandbox_id: str, *, reason: str) -> None:
        """Kills a sandbox and records it, once: under the sandbox's lock, and a sandbox
        already killed meanwhile is left as it is. Why: a user's kill and the reaper's exit
        check (a guest stops answering while it is being killed, which looks like a guest
        that exited) used to run at once, and the slower found its cgroup half removed.

        Across processes (``sandgate sandbox kill`` next to a running server, whose exit
        check sees the sandbox die) the lock cannot help: the row is marked killed *before*
        the runtime kill, by a compare-and-set the store decides, and only its winner kills
        and records; a failed kill puts the row back as it was."""
        self._routes.pop(sandbox_id, None)
        async with self._lock(sandbox_id):
            killed = await self._kill_once(sandbox_id, reason)
        self._locks.pop(sandbox_id, None)  # also when another kill got there first
        if killed:
            log.info("sandbox.killed", sandbox=sandbox_id, reason=reason)

    async def _kill_once(self, sandbox_id: str, reason: str) -> bool:
        """``_terminate``'s work under the sandbox's lock; False when it was not this
        call's to do (already killed, or ended by another process meanwhile)."""
        row = self._store.sandbox(sandbox_id)
        if row is not None and row.state == SandboxState.KILLED.value:
            return False
        if row is not None and row.state in KEPT_STATES:
            check_transition(sandbox_id, SandboxState(row.state), SandboxState.KILLED)
        if row is not None and row.state == SandboxState.RUNNING.value:
            await self._before_stop(row)
        if row is not None and not self._store.update_sandbox_if(
            sandbox_id, row.state, state=SandboxState.KILLED.value, ended_at=datetime.now(UTC)
        ):
            log.info("sandbox.kill_skipped", sandbox=sandbox_id, why="ended elsewhere")
            return False
        try:
            await self._runtime.kill(sandbox_id)
        except BaseException:
            if row is not None:
                self._store.update_sandbox(sandbox_id, state=row.state, ended_at=row.ended_at)
            raise
        await self._detach(sandbox_id)
        shutil.rmtree(self._root / sandbox_id, ignore_errors=True)
        await self._snapshots.forget_sandbox(sandbox_id)
        if row is not None:
            await self._record("sandbox.killed", row, reason=reason)
        self._routes.pop(sandbox_id, None)
        return True

    async def _discard(self, sandbox_id: str) -> None:
        """Undoes a failed create completely (the sandbox never existed)."""
        self._routes.pop(sandbox_id, None)
        with contextlib.suppress(SandgateError):
            await self._runtime.kill(sandbox_id)
        await self._detach(sandbox_id)
        shutil.rmtree(self._root / sandbox_id, ignore_errors=True)
        await self._snapshots.forget_sandbox(sandbox_id)
        self._store.delete_sandbox(sandbox_id)

    def _prepare_host_dir(
        self, host_dir: Path, envs: Mapping[str, str], template: Template
    ) -> None:
        # SECURITY: the directory is root's and read-only inside the sandbox (runtimes mount
        # it so). The guest's archive is one root-owned file for every sandbox, which the
        # runtime binds over this placeholder read-only (``SandboxSpec.guest``; ro, nosuid,
        # nodev, locked for the sandbox's user namespace): no sandbox can change the guest
        # others run, as none can change the template tree they share. Never a hard link: its
        # link count would tell a sandbox how many others run.
        publish_file(host_dir, GUEST_ARCHIVE, b"")
        guest_config = {
            "envs": dict(envs),
            # The template's last set_user/set_workdir (E2B persists them as the defaults).
            "default_user": template.default_user or "user",
            "default_workdir": template.default_workdir,
            "egress_proxy_port": EGRESS_PROXY_PORT,
            "sudo": self._config.sandbox.sudo,
        }
        publish_file(host_dir, "guest.json", json.dumps(guest_config).encode())
        _publish_envs(host_dir, envs)

    async def _detach(self, sandbox_id: str) -> None:
        for hook in self._hooks:
            await hook.detach(sandbox_id)

    def guest_of(self, sandbox_id: str) -> GuestClient:
        """A client for a sandbox's guest, whatever the sandbox's state (for observers such
        as telemetry, which ask only sandboxes they know run); no ownership check."""
        return self._guest(sandbox_id)

    def _guest(self, sandbox_id: str) -> GuestClient:
        return GuestClient(
            self._root / sandbox_id / "guest.sock",
            on_unreachable=lambda: self._reaper.suspect(sandbox_id),
        )

    async def _wait_ready(self, sandbox_id: str) -> None:
        """Waits until the guest answers a ping. The runtime bound the guest's listening
        socket before the sandbox started, so one ping queues until the guest accepts it: no
        polling, and a guest that dies first closes the socket, which fails the ping at once."""
        try:
            await self._guest(sandbox_id).ping(timeout_s=_READY_TIMEOUT_S)
        except GuestError as exc:
            try:
                guest_log = await self._runtime.guest_log(sandbox_id)
            except SandgateError:
                guest_log = ""
            # The sandbox (and its log) is removed next: what the guest said stays here.
            log.warning(
                "sandbox.not_ready", sandbox=sandbox_id, error=exc.message, guest_log=guest_log
            )
            raise SandboxUnavailable(
                f"sandbox {sandbox_id} did not become ready ({exc.message}); see `sandgate doctor`"
            ) from None

    async def _start_template_service(self, sandbox_id: str, template: Template) -> None:
        """Starts the template's service (its start command, e.g. the code interpreter) and
        waits until it is ready: its port accepts connections, or its ready command exits 0."""
        guest = self._guest(sandbox_id)
        start_cmd = template.start_cmd
        ready_port = template.ready_port
        ready_cmd = template.ready_cmd
        if ready_cmd and ready_port is None:
            wait_for_port = _WAIT_FOR_PORT.fullmatch(ready_cmd.strip())
            if wait_for_port is not None and int(wait_for_port[1]) <= 65535:
                ready_port, ready_cmd = int(wait_for_port[1]), None
        if start_cmd:
            stream = await guest.spawn(
                "/bin/bash", ["-l", "-c", start_cmd], tag="sandgate:start", stdin=False
            )
            await stream.aclose()  # the service keeps running; we only drop its output
        if ready_cmd:
            await self._wait_ready_cmd(guest, ready_cmd)
        if ready_port is None:
            return
        await self._wait_ready_port(guest, ready_port)

    async def _wait_ready_port(self, guest: GuestClient, port: int) -> None:
        """Waits until ``port`` accepts a connection in the sandbox. The guest retries it
        for up to ``_READY_PORT_STEP_S`` per request (a refused connect there costs next to
        nothing), so the port is seen within milliseconds of opening; a guest that answers
        at once (older than that) is asked again after a growing pause."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + _SERVICE_READY_TIMEOUT_S
        delay = 0.01
        while True:
            asked = loop.time()
            wait_s = max(0.0, min(_READY_PORT_STEP_S, deadline - asked))
            try:
                _, writer = await guest.tunnel(port, wait_s=wait_s)
                writer.close()
                return
            except GuestError:
                if loop.time() > deadline:
                    raise SandboxUnavailable(
                        f"the template's service did not open port {port} within "
                        f"{_SERVICE_READY_TIMEOUT_S:.0f}s"
                    ) from None
            if loop.time() - asked < wait_s / 2:
                await asyncio.sleep(delay)
                delay = min(delay * 2, 0.1)

    async def _wait_ready_cmd(self, guest: GuestClient, ready_cmd: str) -> None:
        """Runs the template's ready command (as its default user) until it exits 0."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + _SERVICE_READY_TIMEOUT_S
        delay = 0.02
        while True:
            code, output = await _run_to_end(guest, ready_cmd)
            if code == 0:
                return
            if loop.time() > deadline:
                raise SandboxUnavailable(
                    f"the template's ready command did not succeed within "
                    f"{_SERVICE_READY_TIMEOUT_S:.0f}s (last exit {code}"
                    + (f": {output[-300:]}" if output else "")
                    + f"); command: {ready_cmd[:200]}"
                )
            await asyncio.sleep(delay)
            delay = min(delay * 2, 0.2)

    async def _guest_alive(self, sandbox_id: str) -> bool:
        try:
            await self._guest(sandbox_id).ping()
        except GuestError:  # GuestUnavailable included
            return False
        return True

    def _check_timeout(self, timeout_s: int | None) -> int:
        return self._check_range(
            "timeout",
            timeout_s,
            self._limits.default_timeout_s,
            1,
            self._limits.max_timeout_s,
            "limits.max_timeout_s",
        )

    @staticmethod
    def _check_range(
        field: str, value: int | None, default: int, low: int, high: int, setting: str
    ) -> int:
        if value is None:
            return default
        if not low <= value <= high:
            raise LimitExceeded(
                f"{field} must be between {low} and {high} ({setting}); got {value}"
            )
        return value

    def _check_quotas(self, team_id: str) -> None:
        team_live, total = self._store.live_counts(team_id)
        if team_live >= self._limits.max_sandboxes_per_team:
            raise QuotaExceeded(
                f"your team already has {team_live} sandboxes; the limit is "
                f"{self._limits.max_sandboxes_per_team} (limits.max_sandboxes_per_team). "
                "Kill one or raise the limit"
            )
        if total >= self._limits.max_sandboxes_total:
            raise QuotaExceeded(
                f"this server already runs {total} sandboxes; the limit is "
                f"{self._limits.max_sandboxes_total} (limits.max_sandboxes_total)"
            )


async def _run_to_end(guest: GuestClient, command: str) -> tuple[int, str]:
    """Runs ``command`` in the sandbox (as its default user, at most 10 s) and returns its
    exit code and the tail of its output."""
    output = b""
    try:
        stream = await guest.spawn(
            "/bin/bash", ["-l", "-c", command], tag="sandgate:ready", timeout_ms=10_000
        )
        async with stream:
            async for event in stream:
                if isinstance(event, Output):
                    output = (output + event.data)[-2000:]
                elif isinstance(event, Ended):
                    return event.exit_code, output.decode(errors="replace").strip()
    except GuestError as exc:
        return -1, exc.message
    return -1, output.decode(errors="replace").strip()


def _check_lifecycle(request: CreateRequest) -> None:
    """E2B's rules for ``lifecycle`` (its SDKs check them too; raw callers get a 400)."""
    if request.on_timeout not in ("kill", "pause"):
        raise InvalidRequest("lifecycle.onTimeout must be 'kill' or 'pause'")
    if request.auto_resume and request.on_timeout != "pause":
        raise InvalidRequest(
            "autoResume needs autoPause: only a sandbox paused at its timeout can wake on traffic"
        )
    if request.auto_resume and not request.auto_pause_memory:
        raise InvalidRequest(
            "autoResume cannot be combined with autoPauseMemory=false: a sandbox paused to disk "
            "boots fresh, so it is resumed with connect, not by traffic"
        )


def _sha256(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def _publish_envs(host_dir: Path, envs: Mapping[str, str]) -> None:
    """Writes the sandbox-level environment where services inside can read it
    (``/run/sandgate/envs.json``; the code interpreter applies it to its kernels). Atomic."""
    publish_file(host_dir, "envs.json", json.dumps(dict(envs)).encode())


def _not_found(sandbox_id: str) -> SandboxNotFound:
    return SandboxNotFound(f"sandbox '{sandbox_id}' not found (it may have been killed or expired)")


def _parse_token(token: str) -> tuple[datetime, str]:
    try:
        started, last_id = token.split("|", 1)
        return datetime.fromisoformat(started), last_id
    except ValueError:
        raise InvalidRequest("invalid nextToken: pass back the x-next-token header value") from None
