"""A runtime held back by its floors: it refuses to start sandboxes, nothing else.

``select.py`` wraps the chosen runtime in ``FloorGuard`` when a floor it depends on is below
and not accepted (``floors.py``). Every path that starts a sandbox goes through
``Runtime.create`` (API creates, the warm pool, ``sandgate run``/``chat``), so refusing there
covers them all. Sandboxes that already exist (started before, under an exception since
removed) can still be listed, paused, resumed, saved (snapshots) and killed: refusing those
would strand them, and killing them is the operator's call.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from sandgate.errors import RuntimeBelowFloor
from sandgate.runtimes.base import Runtime, RuntimeSandbox, SandboxSpec, SandboxStats

__all__ = ["FloorGuard"]


class FloorGuard:
    """Wraps ``inner``; ``create`` raises ``RuntimeBelowFloor`` with ``refusal``."""

    def __init__(self, inner: Runtime, refusal: str) -> None:
        self.inner = inner
        self.name = inner.name
        self.refusal = refusal

    async def ping(self) -> str:
        return await self.inner.ping()

    async def create(self, spec: SandboxSpec) -> str:
        # SECURITY: raised before the inner runtime is touched, so nothing runs on a runtime
        # with an open, known escape; the caller removes its row and directory as on any error.
        raise RuntimeBelowFloor(self.refusal)

    async def kill(self, sandbox_id: str) -> None:
        await self.inner.kill(sandbox_id)

    async def pause(self, sandbox_id: str) -> None:
        await self.inner.pause(sandbox_id)

    async def resume(self, sandbox_id: str) -> None:
        await self.inner.resume(sandbox_id)

    async def list(self) -> list[RuntimeSandbox]:
        return await self.inner.list()

    async def pid(self, sandbox_id: str) -> int | None:
        return await self.inner.pid(sandbox_id)

    async def stats(self, sandbox_ids: Sequence[str]) -> dict[str, SandboxStats]:
        return await self.inner.stats(sandbox_ids)

    async def layer_in_use(self, sandbox_id: str) -> int:
        return await self.inner.layer_in_use(sandbox_id)

    async def guest_log(self, sandbox_id: str, limit: int = 4096) -> str:
        return await self.inner.guest_log(sandbox_id, limit)

    async def save_layer(self, sandbox_id: str, archive: Path) -> int:
        return await self.inner.save_layer(sandbox_id, archive)
