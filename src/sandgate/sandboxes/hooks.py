"""Extension points of the sandbox lifecycle, for services that live beside each sandbox
(the tool gateway's per-sandbox socket, generated tool stubs, the egress bridge)."""

from __future__ import annotations

from pathlib import Path
from typing import Protocol

from sandgate.store import Sandbox


class SandboxHook(Protocol):
    async def attach(self, sandbox: Sandbox, host_dir: Path) -> dict[str, str]:
        """Called before a new sandbox starts and when a restarted gateway adopts a running
        one. ``host_dir`` is mounted at ``/run/sandgate`` inside the sandbox; files and
        sockets placed there are visible to it. Returns environment variables to add to
        every process of a *new* sandbox (ignored on adoption). Raising aborts a create."""
        ...

    async def detach(self, sandbox_id: str) -> None:
        """Called once a sandbox is gone (killed, expired, lost); must not raise."""
        ...
