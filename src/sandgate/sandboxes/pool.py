"""The warm pool: sandboxes of a template started before anyone asks for them.

A warm sandbox has booted (its guest answers) but has no row, owner or environment yet; a
create of that template at the default size claims one, gives it its row and environment, and
the pool starts another in the background (``templates.warm_pool`` says how many per
template). Booting, checking and removing a sandbox are the lifecycle service's; the pool only
holds started ones and decides when to start more.
"""

from __future__ import annotations

import asyncio
import contextlib
import secrets
import shutil
import string
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path

import structlog

from sandgate.config import Config
from sandgate.errors import SandgateError
from sandgate.runtimes import Runtime
from sandgate.store import Template

__all__ = ["Warm", "WarmPool", "new_sandbox_id"]

log = structlog.get_logger("sandgate.sandboxes")

_ID_ALPHABET = string.ascii_lowercase + string.digits
#: 25 characters of [a-z0-9] is 129 bits: ids cannot be guessed (AUTH-04), and they are
#: never credentials anyway.
_ID_LENGTH = 25
#: Boot failures in a row after which a refill gives up until the next claim.
_MAX_FAILURES = 3


def new_sandbox_id() -> str:
    return "".join(secrets.choice(_ID_ALPHABET) for _ in range(_ID_LENGTH))


@dataclass(frozen=True)
class Warm:
    """A started sandbox waiting in the pool: it has no row, owner or environment yet."""

    sandbox_id: str
    ref: str


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
    ) -> None:
        """``alive`` says whether a sandbox's guest answers; ``discard`` removes a sandbox that
        never had a row (runtime sandbox, host directory, hooks)."""
        self._config = config
        self._limits = config.limits
        self._runtime = runtime
        self._root = root
        self._boot = boot
        self._alive = alive
        self._discard = discard
        self._pools: dict[str, list[Warm]] = {}
        self._filling: dict[str, asyncio.Task[None]] = {}

    def sizes(self) -> dict[str, int]:
        """Started sandboxes waiting in each template's warm pool (the metrics' gauge)."""
        return {key: len(pool) for key, pool in self._pools.items()}

    async def take(self, template: Template, cpu: int, memory: int) -> Warm | None:
        """A started, unclaimed, answering sandbox of ``template`` with the default size."""
        if (cpu, memory) != (self._limits.default_cpu_count, self._limits.default_memory_mb):
            return None
        pool = self._pools.get(_pool_key(template), [])
        while pool:
            warm = pool.pop(0)
            if await self._alive(warm.sandbox_id):
                return warm
            await self._discard(warm.sandbox_id)
        return None

    def put_back(self, template: Template, warm: Warm) -> None:
        """Returns a claimed sandbox that its create could not use (refused before it was
        touched: a quota, say)."""
        self._pools.setdefault(_pool_key(template), []).append(warm)

    def refill(self, template: Template) -> None:
        """Starts filling ``template``'s pool up to its configured size in the background,
        unless it is being filled already or has no pool."""
        wanted = self._config.templates.warm_pool.get(template.name, 0)
        if wanted <= 0 or template.name in self._filling:
            return
        task = asyncio.create_task(self._fill(template, wanted), name=f"pool-{template.name}")
        self._filling[template.name] = task

    async def wait_filled(self) -> None:
        """Returns once the refills under way have ended (their sandboxes are in the pool or
        were given up), e.g. for a benchmark or a test that wants a warm create."""
        while self._filling:
            await asyncio.gather(*self._filling.values(), return_exceptions=True)

    async def _fill(self, template: Template, wanted: int) -> None:
        pool = self._pools.setdefault(_pool_key(template), [])
        failures = 0
        try:
            while len(pool) < wanted and failures < _MAX_FAILURES:
                sandbox_id = new_sandbox_id()
                (self._root / sandbox_id).mkdir(parents=True, mode=0o755)
                try:
                    ref = await self._boot(sandbox_id, template)
                except SandgateError as exc:
                    failures += 1
                    log.warning("pool.boot_failed", template=template.name, error=exc.message)
                    await self._discard(sandbox_id)
                    continue
                except asyncio.CancelledError:
                    await self._discard(sandbox_id)  # stopped mid-boot: leave nothing behind
                    raise
                pool.append(Warm(sandbox_id, ref))
        finally:
            self._filling.pop(template.name, None)

    async def drain(self) -> None:
        """Stops every refill and removes every waiting sandbox (the gateway is stopping)."""
        for name, task in list(self._filling.items()):
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError, SandgateError):
                await task
            self._filling.pop(name, None)
        for pool in self._pools.values():
            while pool:
                warm = pool.pop()
                with contextlib.suppress(SandgateError):
                    await self._runtime.kill(warm.sandbox_id)
                shutil.rmtree(self._root / warm.sandbox_id, ignore_errors=True)


def _pool_key(template: Template) -> str:
    return template.name
