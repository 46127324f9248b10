"""The warm pool: sandboxes of a template started before anyone asks for them.

A warm sandbox has booted (its guest answers) but has no row, owner or environment yet; a
create of that template at the default size claims one, gives it its row and environment, and
the pool starts more in the background. Booting, checking and removing a sandbox are the
lifecycle service's; the pool only holds started ones and decides when to start or stop more.

Sizing (``templates.warm_pool``, ``config.WarmPoolSize``): each template's pool aims at a
*target* between its ``min`` and ``max``, starting at ``min``. A take that leaves the pool
empty (a hit that took the last one, or a miss) raises the target by one, so a burst that
drains the pool grows it toward ``max``; after ``templates.warm_pool_idle_s`` without a take,
half the excess above ``min`` is stopped, and again after each further idle period. Refills
boot up to ``_REFILL_PARALLEL`` sandboxes of a template at once: a drained pool of ``max``
comes back in ``max / _REFILL_PARALLEL`` boot times, not ``max``.
"""

from __future__ import annotations

import asyncio
import contextlib
import secrets
import shutil
import string
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path

import structlog

from sandgate._tasks import cancel_and_wait
from sandgate.config import Config, LimitsConfig, WarmPoolSize
from sandgate.errors import SandgateError
from sandgate.runtimes import Runtime
from sandgate.sandboxes.publish import make_host_dir
from sandgate.store import Snapshot, Template

__all__ = ["Warm", "WarmPool", "default_size", "new_sandbox_id"]

log = structlog.get_logger("sandgate.sandboxes")

_ID_ALPHABET = string.ascii_lowercase + string.digits
#: 25 characters of [a-z0-9] is 129 bits: ids cannot be guessed (AUTH-04), and they are
#: never credentials anyway.
_ID_LENGTH = 25
#: Boot failures in a row after which a template's refills give up until the next claim.
_MAX_FAILURES = 3
#: Sandboxes of one template booting for its pool at once. More would only queue on the
#: host's cores (a boot is mostly the guest's interpreter start) and slow the creates that
#: are being served cold meanwhile.
_REFILL_PARALLEL = 4
#: Longest wait between two checks for idle pools.
_TRIM_CHECK_S = 30.0


def default_size(sized: Template | Snapshot, limits: LimitsConfig) -> tuple[int, int]:
    """The CPUs and memory (MiB) a sandbox of ``sized`` gets when its create asks for
    neither: its template's (or snapshot's) own, as E2B sizes a sandbox by its template,
    within ``limits``' caps; ``limits``' defaults for one that records none."""
    cpu = sized.cpu_count or limits.default_cpu_count
    memory = sized.memory_mb or limits.default_memory_mb
    return min(cpu, limits.max_cpu_count), min(memory, limits.max_memory_mb)


def new_sandbox_id() -> str:
    return "".join(secrets.choice(_ID_ALPHABET) for _ in range(_ID_LENGTH))


@dataclass(frozen=True)
class Warm:
    """A started sandbox waiting in the pool: it has no row, owner or environment yet."""

    sandbox_id: str
    ref: str


@dataclass
class _Pool:
    """One template's pool: its bounds, current target, waiting and booting sandboxes."""

    template: Template
    size: WarmPoolSize
    target: int
    last_take: float
    ready: list[Warm] = field(default_factory=list)
    booting: int = 0
    failures: int = 0


#: Boots a sandbox of a template (default size, no environment of its own) in its existing
#: host directory and returns the runtime's reference once its guest answers.
Boot = Callable[[str, Template], Awaitable[str]]


class WarmPool:
    def __init__(
        self,
        config: Config,
        runtime: Runtime,
        root: Path,
        *,
        boot: Boot,
        alive: Callable[[str], Awaitable[bool]],
        discard: Callable[[str], Awaitable[None]],
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        """``alive`` says whether a sandbox's guest answers; ``discard`` removes a sandbox that
        never had a row (runtime sandbox, host directory, hooks). ``clock`` (monotonic
        seconds) decides when a pool has been idle long enough to shrink."""
        self._config = config
        self._limits = config.limits
        self._runtime = runtime
        self._root = root
        self._boot = boot
        self._alive = alive
        self._discard = discard
        self._clock = clock
        self._idle_s = float(config.templates.warm_pool_idle_s)
        self._pools: dict[str, _Pool] = {}
        self._tasks: set[asyncio.Task[None]] = set()  # boots
        self._discards: set[asyncio.Task[None]] = set()
        self._trimmer: asyncio.Task[None] | None = None

    def sizes(self) -> dict[str, int]:
        """Started sandboxes waiting in each template's warm pool (the metrics' gauge)."""
        return {key: len(pool.ready) for key, pool in self._pools.items()}

    def targets(self) -> dict[str, int]:
        """How many sandboxes each template's pool is aiming at right now."""
        return {key: pool.target for key, pool in self._pools.items()}

    async def take(self, template: Template, cpu: int, memory: int) -> Warm | None:
        """A started, unclaimed, answering sandbox of ``template`` at its default size
        (``default_size``, what the pool boots), or None. Either way the pool refills (and
        grows when this take left it empty)."""
        if (cpu, memory) != default_size(template, self._limits):
            return None
        pool = self._pool_of(template)
        if pool is None:
            return None
        pool.last_take = self._clock()
        pool.failures = 0
        found: Warm | None = None
        while pool.ready:
            warm = pool.ready.pop(0)
            if await self._alive(warm.sandbox_id):
                found = warm
                break
            await self._discard(warm.sandbox_id)
        if not pool.ready and pool.target < pool.size.max:
            pool.target += 1
        self.refill(template)
        return found

    def put_back(self, template: Template, warm: Warm) -> None:
        """Returns a claimed sandbox that its create could not use (refused before it was
        touched: a quota, say)."""
        pool = self._pool_of(template)
        if pool is None:  # not configured any more: cannot happen without a restart
            self._spawn_discard(warm.sandbox_id)
            return
        pool.ready.append(warm)

    def refill(self, template: Template) -> None:
        """Starts booting sandboxes in the background until ``template``'s pool (waiting plus
        booting) reaches its target, at most ``_REFILL_PARALLEL`` at once; each boot that ends
        starts the next. Does nothing for a template without a pool or whose boots keep
        failing (until the next take)."""
        pool = self._pool_of(template)
        if pool is None:
            return
        while (
            len(pool.ready) + pool.booting < pool.target
            and pool.booting < _REFILL_PARALLEL
            and pool.failures < _MAX_FAILURES
        ):
            pool.booting += 1
            self._spawn(self._boot_one(pool), f"pool-{template.name}")

    def start(self) -> None:
        """Starts shrinking idle pools in the background (``drain`` stops it)."""
        if self._trimmer is None:
            self._trimmer = asyncio.create_task(self._trim_loop(), name="pool-trim")

    async def wait_filled(self) -> None:
        """Returns once the refills under way have ended (their sandboxes are in the pool or
        were given up), e.g. for a benchmark or a test that wants a warm create."""
        while self._tasks:
            await asyncio.gather(*list(self._tasks), return_exceptions=True)

    def trim(self) -> list[str]:
        """Shrinks each pool idle for ``warm_pool_idle_s``: its target loses half its excess
        above ``min`` (at least one) and the surplus waiting sandboxes are removed in the
        background. Returns the ids removed."""
        now = self._clock()
        removed: list[str] = []
        for pool in self._pools.values():
            if pool.target <= pool.size.min or now - pool.last_take < self._idle_s:
                continue
            excess = pool.target - pool.size.min
            pool.target -= max(1, excess // 2)
            pool.last_take = now  # the next step waits another idle period
            while len(pool.ready) > pool.target:
                warm = pool.ready.pop()
                removed.append(warm.sandbox_id)
                self._spawn_discard(warm.sandbox_id)
            log.info("pool.shrunk", template=pool.template.name, target=pool.target)
        return removed

    async def drain(self) -> None:
        """Stops every refill and removes every waiting sandbox (the gateway is stopping)."""
        if self._trimmer is not None:
            await cancel_and_wait(self._trimmer)
            self._trimmer = None
        for task in list(self._tasks):
            task.cancel()
        for task in list(self._tasks):
            await cancel_and_wait(task, absorb=(SandgateError,))
        if self._discards:
            await asyncio.gather(*list(self._discards), return_exceptions=True)
        for pool in self._pools.values():
            while pool.ready:
                warm = pool.ready.pop()
                with contextlib.suppress(SandgateError):
                    await self._runtime.kill(warm.sandbox_id)
                shutil.rmtree(self._root / warm.sandbox_id, ignore_errors=True)

    # -- internals ------------------------------------------------------------------------

    def _pool_of(self, template: Template) -> _Pool | None:
        pool = self._pools.get(_pool_key(template))
        if pool is not None:
            pool.template = template  # the latest row: a rebuilt template boots its new image
            return pool
        size = self._config.templates.warm_pool.get(template.name)
        if size is None or size.max <= 0:
            return None
        pool = _Pool(template, size, target=size.min, last_take=self._clock())
        self._pools[_pool_key(template)] = pool
        return pool

    def _spawn(self, work: Awaitable[None], name: str) -> None:
        task = asyncio.ensure_future(work)
        task.set_name(name)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def _spawn_discard(self, sandbox_id: str) -> None:
        """Removes a waiting sandbox in the background; ``drain`` waits for it, never
        cancels it (half a removal would leave a sandbox nobody owns)."""
        task = asyncio.ensure_future(self._discard(sandbox_id))
        self._discards.add(task)
        task.add_done_callback(self._discards.discard)

    async def _boot_one(self, pool: _Pool) -> None:
        template = pool.template
        sandbox_id = new_sandbox_id()
        try:
            make_host_dir(self._root / sandbox_id)
            ref = await self._boot(sandbox_id, template)
        except SandgateError as exc:
            pool.failures += 1
            await self._discard(sandbox_id)  # told once nothing of it is left
            log.warning("pool.boot_failed", template=template.name, error=exc.message)
            if pool.failures >= _MAX_FAILURES and pool.booting == 1:
                # The last boot under way: nothing more starts until the next take.
                log.warning(
                    "pool.gave_up",
                    template=template.name,
                    failures=pool.failures,
                    why="its boots keep failing; the next create of the template tries again",
                )
        except asyncio.CancelledError:
            pool.booting -= 1
            await self._discard(sandbox_id)  # stopped mid-boot: leave nothing behind
            raise
        else:
            if len(pool.ready) >= pool.target:  # shrunk while it booted
                await self._discard(sandbox_id)
            else:
                pool.failures = 0
                pool.ready.append(Warm(sandbox_id, ref))
        pool.booting -= 1
        self.refill(template)

    async def _trim_loop(self) -> None:
        while True:
            await asyncio.sleep(min(self._idle_s, _TRIM_CHECK_S))
            self.trim()


def _pool_key(template: Template) -> str:
    return template.name
