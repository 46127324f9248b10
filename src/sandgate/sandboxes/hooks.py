"""Extension points of the sandbox lifecycle, for services that live beside each sandbox
(the tool gateway's per-sandbox socket, generated tool stubs, the egress bridge), change a
live one's egress (``NetworkUpdater``), lend it team volumes (``VolumeLender``), and for
those that watch sandboxes (telemetry: metrics and logs; ``LifecycleObserver``)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol

from sandgate.runtimes import VolumeMount
from sandgate.store import Sandbox


class SandboxHook(Protocol):
    async def attach(self, sandbox: Sandbox, host_dir: Path) -> dict[str, str]:
        """Called while a new sandbox's guest starts, or a stored one's starts again (before
        anything else runs in it: the create or resume waits for every hook), and when a
        restarted gateway adopts a running one. ``host_dir`` is mounted at ``/run/sandgate``
        inside the sandbox; files and sockets placed there are visible to it. Returns
        environment variables to add to every process of a new or resumed sandbox (ignored
        on adoption). Raising aborts a create or resume (the sandbox is stopped again)."""
        ...

    async def detach(self, sandbox_id: str) -> None:
        """Called once a sandbox is gone (killed, expired, lost); must not raise."""
        ...

    def boot_env(self, sandbox: Sandbox) -> dict[str, str]:
        """The variables ``attach`` will return for ``sandbox``, as far as they are known
        before it runs, from the sandbox's own row only (never another sandbox's). The guest
        starts with them; a create whose ``attach`` returns exactly these saves a round trip
        to the guest, and one that returns anything else gets what ``attach`` returned. ``{}``
        when nothing is known in advance."""
        ...


class NetworkUpdater(Protocol):
    """The egress side of E2B's ``update_network``."""

    def check_network(self, sandbox: Sandbox) -> Any:
        """Raises ``InvalidRequest`` when ``sandbox``'s row (with its new ``network``) asks for
        egress the operator does not permit."""
        ...

    async def update_network(self, sandbox: Sandbox, host_dir: Path) -> dict[str, str]:
        """Applies the row's network to the live sandbox; returns variables its processes
        need from now on (merged into the sandbox's environment by the caller)."""
        ...


class VolumeLender(Protocol):
    """Team volumes for sandboxes (``volumes``)."""

    async def claim(
        self, team_id: str, mounts: Sequence[Mapping[str, Any]]
    ) -> tuple[VolumeMount, ...]:
        """Resolves ``[{"name", "path"}]`` to mounts ready for the runtime and holds them
        against deletion until ``release``. Raises ``InvalidRequest`` and ``NotFound``."""
        ...

    def release(self, mounts: Sequence[VolumeMount]) -> None:
        """Ends a ``claim``'s hold (the sandbox's row now names the volumes, or it failed)."""
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
