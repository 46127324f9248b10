"""Extension points of the sandbox lifecycle, for services that live beside each sandbox
(the tool gateway's per-sandbox socket, generated tool stubs, the egress bridge) and for
those that watch sandboxes (telemetry: metrics and logs)."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any, Protocol

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


class LifecycleObserver(Protocol):
    async def on_event(self, event: str, sandbox: Sandbox, detail: Mapping[str, Any]) -> None:
        """Called after each lifecycle event the service audits (``sandbox.created``,
        ``sandbox.paused``, ``sandbox.resumed``, ``sandbox.killed`` with a ``reason``,
        ``command.started``), with the sandbox's row as it was. Must not raise."""
        ...

    async def before_stop(self, sandbox: Sandbox) -> None:
        """Called while a running sandbox's guest still answers, just before it is paused or
        killed; the service waits for it, so it must be quick and bounded. Must not raise."""
        ...
