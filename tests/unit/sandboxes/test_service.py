"""``SandboxService``'s own bookkeeping (store rows, routes, host directories, the warm pool,
the reaper, reattach) over the in-memory runtime of ``tests/fixtures/fake_runtime.py`` and a
real SQLite store. What the real runtimes do with a sandbox is tested against them in
tests/integration; here only what the service decides and records is."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import tempfile
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Mapping, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TypeVar

import pytest

from sandgate.access import Principal, create_api_key
from sandgate.config import load_config
from sandgate.errors import InvalidRequest, RuntimeUnavailable, SandboxNotFound
from sandgate.runtimes import RuntimeState, SandboxSpec
from sandgate.sandboxes import CreateRequest, SandboxService, SandboxState
from sandgate.sandboxes.catalog import register
from sandgate.sandboxes.hooks import SandboxHook
from sandgate.sandboxes.service import AuditSink
from sandgate.store import Store
from sandgate.store.models import Sandbox
from sandgate.templates import BuiltTemplate
from tests.fixtures.fake_runtime import FakeRuntime, FakeSandbox

T = TypeVar("T")


@dataclass
class Harness:
    home: Path
    store: Store
    runtime: FakeRuntime
    service: SandboxService
    principal: Principal

    @property
    def dirs(self) -> list[str]:
        root = self.home / "sandboxes"
        return sorted(p.name for p in root.iterdir()) if root.is_dir() else []

    def state(self, sandbox_id: str) -> str | None:
        row = self.store.sandbox(sandbox_id)
        return row.state if row is not None else None

    def new_service(self) -> SandboxService:
        """Another service on the same store and runtime: the gateway after a restart."""
        return _service(self.home, self.store, self.runtime)


@pytest.fixture
def home() -> Iterator[Path]:
    # Short: the guest socket's path must fit a Unix socket address (108 bytes).
    path = Path(tempfile.mkdtemp(prefix="sgsvc", dir="/tmp"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


def _environ(home: Path) -> dict[str, str]:
    # The fake runtime's sandboxes need no tmpfs, and a test must leave no mount behind.
    return {"SANDGATE_HOME": str(home), "SANDGATE_RUNTIME__TMPFS": "false"}


def _service(
    home: Path,
    store: Store,
    runtime: FakeRuntime,
    observers: Sequence[Events] = (),
    hooks: Sequence[SandboxHook] = (),
    audit: AuditSink | None = None,
) -> SandboxService:
    config = load_config(home / "sandgate.yaml", environ=_environ(home))
    return SandboxService(
        config,
        store,
        runtime,
        instance_id="test",
        guest_zipapp=home / "guest.pyz",
        observers=observers,
        hooks=hooks,
        audit=audit,
    )


class Events:
    """A lifecycle observer that keeps the events it hears of, with their reasons."""

    def __init__(self) -> None:
        self.seen: list[tuple[str, str, object]] = []

    async def on_event(self, event: str, row: Sandbox, detail: Mapping[str, object]) -> None:
        self.seen.append((event, row.id, detail.get("reason")))

    async def before_stop(self, row: Sandbox) -> None:
        return None


def _run(
    home: Path,
    body: Callable[[Harness], Awaitable[T]],
    *,
    warm_pool: int = 0,
    pooled: str = "base",
) -> T:
    pool = f"templates:\n  warm_pool:\n    {pooled}: {warm_pool}\n" if warm_pool else "{}\n"
    (home / "sandgate.yaml").write_text(pool)
    (home / "guest.pyz").write_bytes(b"not run: the fake runtime starts no guest process")
    config = load_config(home / "sandgate.yaml", environ=_environ(home))
    store = Store.open(config.store_url)
    register(store, BuiltTemplate("base", "sandgate/template-base:latest", "sha256:x", "d"))
    key, _ = create_api_key(store, "t", "k")
    runtime = FakeRuntime()
    harness = Harness(
        home, store, runtime, _service(home, store, runtime), Principal(key.team_id, key.id)
    )

    async def main() -> T:
        async with _stopped(harness.service):
            return await body(harness)

    try:
        return asyncio.run(main())
    finally:
        store.close()


@asynccontextmanager
async def _stopped(service: SandboxService) -> AsyncIterator[None]:
    try:
        yield
    finally:
        await service.stop()


def _request(**envs: str) -> CreateRequest:
    return CreateRequest(template="base", timeout_s=300, metadata={"k": "v"}, envs=dict(envs))


def _sized(template: str, **size: int) -> CreateRequest:
    return CreateRequest(template=template, timeout_s=300, metadata={}, envs={}, **size)


def test_create_then_kill_keeps_store_runtime_and_routes_in_step(home: Path) -> None:
    async def body(h: Harness) -> None:
        row = await h.service.create(h.principal, _request(A="1"))
        assert h.state(row.id) == SandboxState.RUNNING.value
        assert h.store.sandbox(row.id).runtime_ref == f"fake-{row.id}"  # type: ignore[union-attr]
        assert h.runtime.sandboxes[row.id].requests == ["ping"]  # booted, then asked if ready
        # The template's recorded image id goes to the runtime (its tree without the engine).
        assert h.runtime.sandboxes[row.id].spec.image_id == "sha256:x"
        # The spawn is counted on its template (E2B's spawnCount / lastSpawnedAt).
        template = h.store.template_by_name_or_id("base")
        assert template is not None and template.spawn_count == 1
        assert template.last_spawned_at is not None
        assert h.service.route(row.id) is not None
        assert h.dirs == [row.id]
        await h.service.kill(h.principal, row.id)
        assert h.state(row.id) == SandboxState.KILLED.value
        assert h.runtime.killed == [row.id]
        assert h.service.route(row.id) is None
        assert h.dirs == []
        with pytest.raises(SandboxNotFound):
            await h.service.kill(h.principal, row.id)

    _run(home, body)


def test_pause_freezes_and_connect_thaws(home: Path) -> None:
    async def body(h: Harness) -> None:
        row = await h.service.create(h.principal, _request())
        await h.service.pause(h.principal, row.id)
        assert h.state(row.id) == SandboxState.PAUSED.value
        assert h.runtime.sandboxes[row.id].state is RuntimeState.PAUSED
        assert h.service.route(row.id) is None  # no traffic reaches a frozen sandbox
        resumed_row, resumed = await h.service.connect(h.principal, row.id, 60)
        assert resumed
        assert resumed_row.state == SandboxState.RUNNING.value
        assert h.runtime.sandboxes[row.id].state is RuntimeState.RUNNING
        _, again = await h.service.connect(h.principal, row.id, 60)
        assert not again  # a running sandbox is not resumed twice

    _run(home, body)


def test_a_failed_runtime_create_leaves_no_row_and_no_directory(home: Path) -> None:
    async def body(h: Harness) -> None:
        h.runtime.fail_create = RuntimeUnavailable("engine gone")
        with pytest.raises(RuntimeUnavailable, match="engine gone"):
            await h.service.create(h.principal, _request())
        assert h.store.count_live() == 0
        assert h.store.live_sandboxes() == []
        assert h.dirs == []
        assert h.runtime.sandboxes == {}

    _run(home, body)


def test_the_warm_pool_is_taken_configured_and_refilled(home: Path) -> None:
    async def body(h: Harness) -> None:
        await h.service.start()
        await h.service.warm_pool_filled()
        assert h.service.warm_pool_sizes() == {"base": 1}
        [warm_id] = h.runtime.created
        assert h.store.sandbox(warm_id) is None  # a warm sandbox has no row yet

        row = await h.service.create(h.principal, _request(MINE="yes"))
        assert row.id == warm_id  # claimed, not booted
        assert h.runtime.sandboxes[warm_id].envs["MINE"] == "yes"  # given its environment
        await h.service.warm_pool_filled()
        assert h.service.warm_pool_sizes() == {"base": 1}
        assert len(h.runtime.created) == 2  # the pool started one more

        sized = CreateRequest(template="base", timeout_s=60, metadata={}, envs={}, cpu_count=2)
        other = await h.service.create(h.principal, sized)
        assert other.id not in (warm_id, *h.runtime.created[:2])  # not the default size
        await h.service.stop()
        spare = h.runtime.created[1]
        assert spare in h.runtime.killed  # stopping removes what waits in the pool
        assert spare not in h.dirs

    _run(home, body, warm_pool=1)


def test_a_sandbox_gets_its_templates_size_within_the_caps(home: Path) -> None:
    """As on E2B, a create that names no size gets its template's (the shipped code
    interpreter is 2 CPUs / 2 GiB); the warm pool boots and serves that size; a template
    larger than ``limits`` allows is held to the caps."""

    async def body(h: Harness) -> None:
        built = BuiltTemplate("big", "sandgate/template-big:latest", "sha256:y", "e")
        register(h.store, built, cpu_count=2, memory_mb=2048)
        huge = BuiltTemplate("huge", "sandgate/template-huge:latest", "sha256:z", "f")
        register(h.store, huge, cpu_count=64, memory_mb=10**6)
        await h.service.start()
        await h.service.warm_pool_filled()
        [warm_id] = h.runtime.created
        spec = h.runtime.sandboxes[warm_id].spec
        assert (spec.cpu_count, spec.memory_mb) == (2, 2048)  # booted at the template's size

        row = await h.service.create(h.principal, _sized("big"))
        assert row.id == warm_id and (row.cpu_count, row.memory_mb) == (2, 2048)
        await h.service.warm_pool_filled()  # the refill boots concurrently with what follows
        other = await h.service.create(h.principal, _sized("big", cpu_count=1, memory_mb=512))
        assert other.id not in h.runtime.created[:2]  # not the pool's size: booted
        other_spec = h.runtime.sandboxes[other.id].spec
        assert (other_spec.cpu_count, other_spec.memory_mb) == (1, 512)
        assert (other.cpu_count, other.memory_mb) == (1, 512)

        capped = await h.service.create(h.principal, _sized("huge"))
        assert (capped.cpu_count, capped.memory_mb) == (4, 8192)  # limits' defaults caps
        register(h.store, huge, cpu_count=2, memory_mb=1024)  # resized at the next start
        resized = await h.service.create(h.principal, _sized("huge"))
        assert (resized.cpu_count, resized.memory_mb) == (2, 1024)
        base = await h.service.create(h.principal, _request())
        assert (base.cpu_count, base.memory_mb) == (1, 512)

    _run(home, body, warm_pool=1, pooled="big")


def test_a_dead_warm_sandbox_is_discarded_not_handed_out(home: Path) -> None:
    async def body(h: Harness) -> None:
        await h.service.start()
        await h.service.warm_pool_filled()
        [warm_id] = h.runtime.created
        await h.runtime.exit(warm_id)
        row = await h.service.create(h.principal, _request())
        assert row.id != warm_id
        assert warm_id not in h.dirs

    _run(home, body, warm_pool=1)


def test_the_reaper_kills_an_expired_sandbox_and_pauses_one_that_asked(home: Path) -> None:
    async def body(h: Harness) -> None:
        doomed = await h.service.create(h.principal, _request())
        pausing = await h.service.create(
            h.principal,
            CreateRequest(template="base", timeout_s=300, metadata={}, envs={}, on_timeout="pause"),
        )
        kept = await h.service.create(h.principal, _request())
        past = datetime.now(UTC) - timedelta(seconds=1)
        h.store.update_sandbox(doomed.id, end_at=past)
        h.store.update_sandbox(pausing.id, end_at=past)
        assert await h.service.reap_expired() == [doomed.id]
        assert h.state(doomed.id) == SandboxState.KILLED.value
        assert doomed.id not in h.runtime.sandboxes
        assert doomed.id not in h.dirs
        assert h.state(pausing.id) == SandboxState.PAUSED.value
        assert h.runtime.sandboxes[pausing.id].state is RuntimeState.PAUSED
        assert h.state(kept.id) == SandboxState.RUNNING.value

    _run(home, body)


def test_the_sweep_ends_a_sandbox_that_stopped_on_its_own(home: Path) -> None:
    async def body(h: Harness) -> None:
        row = await h.service.create(h.principal, _request())
        young = await h.service.create(h.principal, _request())
        h.store.update_sandbox(row.id, started_at=datetime.now(UTC) - timedelta(minutes=1))
        await h.runtime.exit(row.id)
        await h.runtime.exit(young.id)
        await h.service.sweep_exited()
        assert h.state(row.id) == SandboxState.KILLED.value
        assert h.service.route(row.id) is None
        # One created during the runtime's listing is given a grace period.
        assert h.state(young.id) == SandboxState.RUNNING.value

    _run(home, body)


def test_reattach_adopts_what_is_wanted_and_removes_the_rest(home: Path) -> None:
    async def body(h: Harness) -> None:
        alive = await h.service.create(h.principal, _request())
        expired = await h.service.create(h.principal, _request())
        lost = await h.service.create(h.principal, _request())
        h.store.update_sandbox(expired.id, end_at=datetime.now(UTC) - timedelta(seconds=1))
        await h.runtime.exit(lost.id)
        stray = h.home / "sandboxes" / "nobodyknowsthisone"
        stray.mkdir()

        restarted = h.new_service()
        async with _stopped(restarted):
            await restarted.reattach()
            assert restarted.route(alive.id) is not None
            assert h.state(alive.id) == SandboxState.RUNNING.value
            assert h.state(expired.id) == SandboxState.KILLED.value
            assert expired.id not in h.runtime.sandboxes
            assert h.state(lost.id) == SandboxState.KILLED.value
            assert h.dirs == [alive.id]

    _run(home, body)


@pytest.fixture
def narrow_umask() -> Iterator[None]:
    """The gateway started by an operator whose umask is 077."""
    old = os.umask(0o077)
    yield
    os.umask(old)


def _sandbox_view(host_dir: Path) -> dict[str, int]:
    """What a sandbox's root (no host user: the "other" bits) reads of its host directory."""
    return {
        p.name: p.stat().st_mode & 0o777
        for p in [host_dir, *host_dir.iterdir()]
        if p.is_dir() or p.is_file()
    }


@pytest.mark.usefixtures("narrow_umask")
def test_a_host_directory_is_readable_inside_whatever_the_gateways_umask(home: Path) -> None:
    # The guest reads its code and configuration as the "other" user: a host directory made
    # under the operator's umask (or while another thread had narrowed it) was a sandbox whose
    # guest could not import itself.
    async def body(h: Harness) -> None:
        cold = await h.service.create(h.principal, _request(A="1"))
        await h.service.pause(h.principal, cold.id)
        await h.service.connect(h.principal, cold.id, 60)  # resumed: its directory made again
        await h.service.warm_pool_filled()
        warm = await h.service.create(h.principal, _request())
        for row in (cold, warm):
            view = _sandbox_view(h.home / "sandboxes" / row.id)
            assert view == {
                row.id: 0o755,
                "guest.pyz": 0o644,
                "guest.json": 0o644,
                "envs.json": 0o644,
            }

    _run(home, body, warm_pool=1)


def test_two_kills_at_once_kill_and_record_the_sandbox_once(home: Path) -> None:
    # A user's kill and the reaper's exit check (a guest that stops answering mid-kill looks
    # exited) used to run at once: the slower found the sandbox half removed and answered 503.
    async def body(h: Harness) -> None:
        row = await h.service.create(h.principal, _request())
        gate = asyncio.Event()
        kills: list[str] = []
        real_kill = h.runtime.kill

        async def slow_kill(sandbox_id: str) -> None:
            kills.append(sandbox_id)
            await gate.wait()
            await real_kill(sandbox_id)

        h.runtime.kill = slow_kill  # type: ignore[method-assign]
        user = asyncio.create_task(h.service.kill(h.principal, row.id))
        while not kills:
            await asyncio.sleep(0)
        operator = asyncio.create_task(h.service.kill_any(row.id))
        for _ in range(20):
            await asyncio.sleep(0)
        gate.set()
        await user
        # The row says killed from the moment the first kill began: the second finds
        # nothing live to kill (a clear "not found", never a 503), and the sandbox is killed once.
        assert await operator is False
        assert kills == [row.id]
        assert h.state(row.id) == SandboxState.KILLED.value

    _run(home, body)


def test_a_kill_from_another_process_is_recorded_once_as_its_own(home: Path) -> None:
    # `sandgate sandbox kill` next to a running server: the server's exit check saw the
    # sandbox die mid-kill and recorded "stopped on its own" besides the CLI's "killed by
    # operator". Per-process locks cannot see each other; the store's compare-and-set does.
    async def body(h: Harness) -> None:
        row = await h.service.create(h.principal, _request())
        events = Events()
        cli = _service(h.home, h.store, h.runtime, observers=[events])
        gate = asyncio.Event()
        real_kill = h.runtime.kill

        async def killing(sandbox_id: str) -> None:
            await real_kill(sandbox_id)  # gone from the runtime, as the server will see
            await gate.wait()

        h.runtime.kill = killing  # type: ignore[method-assign]
        in_flight = asyncio.create_task(cli.kill_any(row.id))
        while await h.runtime.pid(row.id) is not None:
            await asyncio.sleep(0)
        server_events = Events()
        server = _service(h.home, h.store, h.runtime, observers=[server_events])
        await server._terminate(row.id, reason="its sandbox stopped on its own")
        gate.set()
        assert await in_flight is True
        assert events.seen == [("sandbox.killed", row.id, "killed by operator")]
        assert server_events.seen == []
        assert row.id not in server._locks  # the loser's lock is not kept either
        assert h.state(row.id) == SandboxState.KILLED.value
        await cli.stop()
        await server.stop()

    _run(home, body)


def test_a_failed_runtime_kill_leaves_the_sandbox_as_it_was(home: Path) -> None:
    async def body(h: Harness) -> None:
        row = await h.service.create(h.principal, _request())

        async def failing(sandbox_id: str) -> None:
            raise RuntimeUnavailable("the engine went away")

        h.runtime.kill = failing  # type: ignore[method-assign]
        with pytest.raises(RuntimeUnavailable):
            await h.service.kill(h.principal, row.id)
        kept = h.store.sandbox(row.id)
        assert kept is not None
        assert (kept.state, kept.ended_at) == (SandboxState.RUNNING.value, None)

    _run(home, body)


class _Hook:
    """A sandbox hook that logs what happens to it; ``partner`` is another hook whose attach
    must have begun before this one's can end (so two such hooks end only if attached at
    once); ``fail`` makes attach raise once the partner has begun; ``slow`` makes it take a
    while more (a slow socket), so that a detach that does not wait for it comes first."""

    def __init__(
        self,
        name: str,
        log: list[str],
        envs: dict[str, str],
        *,
        fail: bool = False,
        slow: bool = False,
    ) -> None:
        self.name, self.log, self.envs, self.fail, self.slow = name, log, envs, fail, slow
        self.began = asyncio.Event()
        self.partner: _Hook | None = None

    async def attach(self, sandbox: Sandbox, host_dir: Path) -> dict[str, str]:
        self.log.append(f"{self.name}.attach")
        self.began.set()
        assert self.partner is not None
        await asyncio.wait_for(self.partner.began.wait(), timeout=5)
        if self.fail:
            self.log.append(f"{self.name}.raised")
            raise InvalidRequest(f"{self.name} refuses")
        if self.slow:
            await asyncio.sleep(0.2)
        self.log.append(f"{self.name}.attached")
        return dict(self.envs)

    async def detach(self, sandbox_id: str) -> None:
        self.log.append(f"{self.name}.detach")

    def boot_env(self, sandbox: Sandbox) -> dict[str, str]:
        return {}


def _pair(log: list[str], *, second_fails: bool = False) -> list[_Hook]:
    first = _Hook("a", log, {"SHARED": "a", "A": "1"}, slow=second_fails)
    second = _Hook("b", log, {"SHARED": "b", "B": "2"}, fail=second_fails)
    first.partner, second.partner = second, first
    return [first, second]


def test_hooks_attach_at_once_and_their_variables_merge_in_hook_order(home: Path) -> None:
    log: list[str] = []

    async def body(h: Harness) -> None:
        service = _service(h.home, h.store, h.runtime, hooks=_pair(log))
        try:
            row = await service.create(h.principal, _request(OWN="c", A="own"))
            assert row.state == SandboxState.RUNNING.value
            assert log[:2] == ["a.attach", "b.attach"]  # each began before either ended
            # The guest's environment (configured once it answered) and envs.json: the
            # later hook's value wins, the caller's own wins over every hook's.
            envs = h.runtime.sandboxes[row.id].envs
            assert (envs["A"], envs["B"], envs["SHARED"], envs["OWN"]) == ("own", "2", "b", "c")
            published = h.runtime.sandboxes[row.id].spec.host_dir / "envs.json"
            assert json.loads(published.read_text()) == envs
        finally:
            await service.stop()

    _run(home, body)


def test_a_hook_that_fails_ends_the_create_after_every_attach_has_ended(home: Path) -> None:
    log: list[str] = []

    async def body(h: Harness) -> None:
        service = _service(h.home, h.store, h.runtime, hooks=_pair(log, second_fails=True))
        try:
            with pytest.raises(InvalidRequest, match="b refuses"):
                await service.create(h.principal, _request())
        finally:
            await service.stop()
        # The failure is raised only once the other hook has attached: its detach (the
        # create's undoing) comes after, never while its attach is still under way.
        assert log.index("b.raised") < log.index("a.attached") < log.index("a.detach")
        assert "b.detach" in log
        assert h.store.count_live() == 0
        assert h.runtime.sandboxes == {}

    _run(home, body)


class _RowRemover:
    """A hook whose attach removes the sandbox's row: another process killing and forgetting
    the sandbox while it boots."""

    def __init__(self, store: Store) -> None:
        self.store = store

    async def attach(self, sandbox: Sandbox, host_dir: Path) -> dict[str, str]:
        self.store.delete_sandbox(sandbox.id)
        return {}

    async def detach(self, sandbox_id: str) -> None:
        return None

    def boot_env(self, sandbox: Sandbox) -> dict[str, str]:
        return {}


def test_a_sandbox_whose_row_went_while_it_booted_is_not_marked_running(home: Path) -> None:
    """The create's last writes go through only while its row is still there: it is not
    brought back as running, and no spawn is counted for it."""

    async def body(h: Harness) -> None:
        service = _service(h.home, h.store, h.runtime, hooks=[_RowRemover(h.store)])
        try:
            with pytest.raises(SandboxNotFound):
                await service.create(h.principal, _request())
        finally:
            await service.stop()
        assert h.store.count_live() == 0
        template = h.store.template_by_name_or_id("base")
        assert template is not None and template.spawn_count == 0

    _run(home, body)


def test_a_create_queues_its_audit_record_before_the_observers_hear_of_it(home: Path) -> None:
    """The record is being written while the observers (telemetry) do their part, and the
    create returns once both are done; the row it returns is the running one."""
    order: list[str] = []
    written: asyncio.Future[object] | None = None

    def audit(record: dict[str, object]) -> asyncio.Future[object]:
        nonlocal written
        order.append(f"audit:{record['event']}")
        written = asyncio.get_running_loop().create_future()
        asyncio.get_running_loop().call_later(0.05, written.set_result, None)
        return written

    class Heard(Events):
        async def on_event(self, event: str, row: Sandbox, detail: Mapping[str, object]) -> None:
            order.append(f"observer:{event}")

    async def body(h: Harness) -> None:
        service = _service(h.home, h.store, h.runtime, observers=[Heard()], audit=audit)
        try:
            row = await service.create(h.principal, _request())
            assert written is not None and written.done()  # the create waited for it
            assert row.state == SandboxState.RUNNING.value
            assert row.runtime_ref == f"fake-{row.id}"
        finally:
            await service.stop()
        assert order[:2] == ["audit:sandbox.created", "observer:sandbox.created"]

    _run(home, body)


class _WaitsForBoot:
    """A hook whose attach ends only once the sandbox's runtime create has returned: a create
    ends only if its hooks attach while the sandbox boots."""

    def __init__(self, booted: asyncio.Event) -> None:
        self.booted = booted

    async def attach(self, sandbox: Sandbox, host_dir: Path) -> dict[str, str]:
        await asyncio.wait_for(self.booted.wait(), timeout=5)
        return {"FROM_HOOK": "1"}

    async def detach(self, sandbox_id: str) -> None:
        return None

    def boot_env(self, sandbox: Sandbox) -> dict[str, str]:
        return {}


def test_hooks_attach_while_the_sandbox_boots_and_reach_its_guest_once_it_answers(
    home: Path,
) -> None:
    async def body(h: Harness) -> None:
        booted = asyncio.Event()
        boot = h.runtime.create

        async def create(spec: SandboxSpec) -> str:
            ref = await boot(spec)
            booted.set()
            return ref

        h.runtime.create = create  # type: ignore[method-assign]
        service = _service(h.home, h.store, h.runtime, hooks=[_WaitsForBoot(booted)])
        try:
            row = await service.create(h.principal, _request(OWN="1"))
        finally:
            await service.stop()
        sandbox = h.runtime.sandboxes[row.id]
        # Asked whether it answers, then given the hooks' variables (with the caller's).
        assert sandbox.requests[:2] == ["ping", "configure"]
        assert sandbox.envs["FROM_HOOK"] == "1" and sandbox.envs["OWN"] == "1"

    _run(home, body)


class _Foretold:
    """A hook that says before the boot what its attach returns (``boot_env``), rightly or
    not."""

    def __init__(self, foretold: dict[str, str], attached: dict[str, str]) -> None:
        self.foretold, self.attached = foretold, attached

    async def attach(self, sandbox: Sandbox, host_dir: Path) -> dict[str, str]:
        return dict(self.attached)

    async def detach(self, sandbox_id: str) -> None:
        return None

    def boot_env(self, sandbox: Sandbox) -> dict[str, str]:
        return dict(self.foretold)


async def _created_with(h: Harness, hook: _Foretold) -> FakeSandbox:
    """One sandbox created with ``hook`` and the caller's own ``OWN=c``: its fake guest, whose
    published environment (envs.json) must be what the guest holds."""
    service = _service(h.home, h.store, h.runtime, hooks=[hook])
    try:
        row = await service.create(h.principal, _request(OWN="c"))
    finally:
        await service.stop()
    sandbox = h.runtime.sandboxes[row.id]
    published = json.loads((sandbox.spec.host_dir / "envs.json").read_text())
    assert published == sandbox.envs
    return sandbox


def test_hook_variables_known_before_the_boot_are_the_guests_from_its_start(home: Path) -> None:
    """The guest starts with them (guest.json and envs.json), and is not asked to change its
    environment once it answers: a round trip fewer per create."""

    async def body(h: Harness) -> None:
        hook = _Foretold({"TOOLS": "1", "OWN": "hook"}, {"TOOLS": "1", "OWN": "hook"})
        sandbox = await _created_with(h, hook)
        assert "configure" not in sandbox.requests
        assert sandbox.envs["TOOLS"] == "1" and sandbox.envs["OWN"] == "c"  # the caller's wins

    _run(home, body)


def test_hook_variables_foretold_wrongly_are_replaced_by_what_attach_returned(
    home: Path,
) -> None:
    """A hook whose attach returns other variables than it foretold (an intercepted egress,
    say): the guest gets exactly what attach returned, nothing left of the foretelling."""

    async def body(h: Harness) -> None:
        hook = _Foretold({"PROXY": "1", "STALE": "x"}, {"PROXY": "1", "CA": "/ca.pem"})
        sandbox = await _created_with(h, hook)
        assert sandbox.requests[:2] == ["ping", "configure"]
        assert (sandbox.envs["PROXY"], sandbox.envs["CA"], sandbox.envs["OWN"]) == (
            "1",
            "/ca.pem",
            "c",
        )
        assert "STALE" not in sandbox.envs

    _run(home, body)
