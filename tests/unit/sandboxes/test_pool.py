"""The warm pool's sizing (``templates.warm_pool`` min/max): refills boot in parallel, a burst
that drains a pool grows it toward its max, an idle pool shrinks back toward its min, and the
code interpreter is warm by default. The pool is driven directly with scripted boots (its
seam to the lifecycle service), the default with ``SandboxService`` over the fake runtime."""

from __future__ import annotations

import asyncio
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from sandgate.access import create_api_key
from sandgate.config import CODE_INTERPRETER_TEMPLATE, LimitsConfig, WarmPoolSize, load_config
from sandgate.errors import ConfigError, RuntimeUnavailable
from sandgate.sandboxes import SandboxService
from sandgate.sandboxes.catalog import register
from sandgate.sandboxes.pool import WarmPool
from sandgate.store import Store, Template
from sandgate.templates import BuiltTemplate
from tests.fixtures.fake_runtime import FakeRuntime


@pytest.fixture
def home() -> Iterator[Path]:
    path = Path(tempfile.mkdtemp(prefix="sgpool", dir="/tmp"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class Boots:
    """Scripted boots: counts them, can hold them at a gate, can fail them."""

    def __init__(self) -> None:
        self.started = 0
        self.running = 0
        self.peak = 0
        self.gate = asyncio.Event()
        self.gate.set()
        self.reached: dict[int, asyncio.Event] = {}
        self.fail = False
        self.discarded: list[str] = []

    async def boot(self, sandbox_id: str, template: Template) -> str:
        self.started += 1
        self.running += 1
        self.peak = max(self.peak, self.running)
        if self.running in self.reached:
            self.reached[self.running].set()
        try:
            await self.gate.wait()
            if self.fail:
                raise RuntimeUnavailable("scripted boot failure")
            return f"ref-{sandbox_id}"
        finally:
            self.running -= 1

    async def alive(self, sandbox_id: str) -> bool:
        return True

    async def discard(self, sandbox_id: str) -> None:
        self.discarded.append(sandbox_id)


def _setup(home: Path, pool: str, clock: Clock | None = None) -> tuple[WarmPool, Boots, Template]:
    config = load_config(
        None,
        environ={"SANDGATE_HOME": str(home), "SANDGATE_TEMPLATES__WARM_POOL": pool},
    )
    boots = Boots()
    warm = WarmPool(
        config,
        FakeRuntime(),
        home / "sandboxes",
        boot=boots.boot,
        alive=boots.alive,
        discard=boots.discard,
        clock=clock or Clock(),
    )
    template = Template(id="t-base", name="base", image_ref="img", envd_version="0.1")
    return warm, boots, template


async def _take(warm: WarmPool, template: Template) -> str | None:
    default = LimitsConfig()  # a take at the default size: what the pool holds
    found = await warm.take(template, default.default_cpu_count, default.default_memory_mb)
    return found.sandbox_id if found is not None else None


def test_a_refill_boots_several_at_once_but_no_more_than_its_limit(home: Path) -> None:
    async def main() -> None:
        warm, boots, template = _setup(home, "{base: 6}")
        boots.gate.clear()
        boots.reached[4] = asyncio.Event()
        warm.refill(template)
        await asyncio.wait_for(boots.reached[4].wait(), 10)
        assert boots.started == 4, "four boots run at once, the rest wait for one to end"
        boots.gate.set()
        await warm.wait_filled()
        assert warm.sizes() == {"base": 6}
        assert (boots.started, boots.peak) == (6, 4)
        await warm.drain()

    asyncio.run(main())


def test_a_burst_that_drains_the_pool_grows_it_toward_its_max(home: Path) -> None:
    async def main() -> None:
        warm, boots, template = _setup(home, "{base: {min: 1, max: 3}}")
        warm.refill(template)
        await warm.wait_filled()
        assert (warm.sizes(), warm.targets()) == ({"base": 1}, {"base": 1})
        boots.gate.clear()  # the burst comes faster than the refills
        assert await _take(warm, template) is not None  # took the last: the target grows
        assert await _take(warm, template) is None  # a miss: it grows again
        assert await _take(warm, template) is None  # at max: it stays
        assert warm.targets() == {"base": 3}
        boots.gate.set()
        await warm.wait_filled()
        assert warm.sizes() == {"base": 3}
        assert boots.started == 4
        await warm.drain()

    asyncio.run(main())


def test_an_idle_pool_gives_back_half_its_excess_per_idle_period(home: Path) -> None:
    async def main() -> None:
        clock = Clock()
        warm, boots, template = _setup(home, "{base: {min: 1, max: 5}}", clock)
        warm.refill(template)
        await warm.wait_filled()
        boots.gate.clear()  # a burst of five: one hit, four misses
        for _ in range(5):
            await _take(warm, template)
        assert warm.targets() == {"base": 5}
        boots.gate.set()
        await warm.wait_filled()
        assert warm.sizes() == {"base": 5}
        assert warm.trim() == [], "not idle yet"
        clock.now += 299
        assert warm.trim() == []
        clock.now += 1  # templates.warm_pool_idle_s (300) without a take
        assert len(warm.trim()) == 2  # excess 4 → 2
        assert warm.targets() == {"base": 3}
        clock.now += 150
        assert warm.trim() == [], "the next step waits a whole idle period"
        for target in (2, 1, 1):
            clock.now += 300
            warm.trim()
            assert warm.targets() == {"base": target}
        await warm.drain()  # waits for the background removals
        assert warm.sizes() == {"base": 0}
        assert len(boots.discarded) == 4  # 5 waiting → 1: the trims removed 4

    asyncio.run(main())


def test_failing_boots_give_up_after_three_until_the_next_take(home: Path) -> None:
    async def main() -> None:
        warm, boots, template = _setup(home, "{base: 4}")
        boots.fail = True
        warm.refill(template)
        await warm.wait_filled()
        started = boots.started
        assert started <= 3 + 3, "three failures in a row stop it (plus boots under way)"
        warm.refill(template)
        await warm.wait_filled()
        assert boots.started == started, "a refill after three failures starts nothing"
        assert len(boots.discarded) == started  # each failed boot left nothing behind
        boots.fail = False
        assert await _take(warm, template) is None
        await warm.wait_filled()
        assert warm.sizes() == {"base": 4}
        await warm.drain()

    asyncio.run(main())


def test_warm_pool_sizes_parse_short_and_long_forms_and_refuse_min_above_max() -> None:
    def pools(text: str) -> dict[str, WarmPoolSize]:
        environ = {"SANDGATE_HOME": "/tmp", "SANDGATE_TEMPLATES__WARM_POOL": text}
        return dict(load_config(None, environ=environ).templates.warm_pool)

    assert pools("{base: 3}") == {"base": WarmPoolSize(min=3, max=3)}
    assert pools("{base: {min: 1, max: 8}}") == {"base": WarmPoolSize(min=1, max=8)}
    assert pools("{}") == {}, "setting it replaces the default: {} turns every pool off"
    with pytest.raises(ConfigError, match=r"warm_pool\.base: .*min \(9\) must not exceed max"):
        pools("{base: {min: 9, max: 2}}")
    with pytest.raises(ConfigError, match=r"warm_pool\.base"):
        pools("{base: -1}")
    default = load_config(None, environ={"SANDGATE_HOME": "/tmp"}).templates.warm_pool
    assert default == {CODE_INTERPRETER_TEMPLATE: WarmPoolSize(min=1, max=2)}


def test_the_code_interpreter_is_warm_by_default_when_it_is_built(home: Path) -> None:
    (home / "guest.pyz").write_bytes(b"not run: the fake runtime starts no guest process")
    config = load_config(
        None, environ={"SANDGATE_HOME": str(home), "SANDGATE_RUNTIME__TMPFS": "false"}
    )
    store = Store.open(config.store_url)
    register(store, BuiltTemplate("base", "sandgate/template-base:latest", "sha256:x", "d"))
    interpreter = BuiltTemplate(CODE_INTERPRETER_TEMPLATE, "sandgate/ci:latest", "sha256:y", "d")
    register(store, interpreter)
    create_api_key(store, "t", "k")
    runtime = FakeRuntime()
    service = SandboxService(
        config, store, runtime, instance_id="test", guest_zipapp=home / "guest.pyz"
    )

    async def main() -> None:
        try:
            await service.start()
            await service.warm_pool_filled()
            assert service.warm_pool_sizes() == {CODE_INTERPRETER_TEMPLATE: 1}
            assert len(runtime.created) == 1, "only the interpreter, nothing for base"
        finally:
            await service.stop()
        assert runtime.killed == runtime.created

    try:
        asyncio.run(main())
    finally:
        store.close()
