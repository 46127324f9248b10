"""The one place a ``SandboxService`` is put together, for ``sandgate serve`` (whose
composition root, ``api.app``, adds the hooks of the tool gateway, egress and volumes) and for
the operator's commands on the host (``sandgate sandbox kill``, ``sandgate run``), which need
the lifecycle, the audit log and the sandbox logs but not the HTTP app, the tool gateway,
template builds or workflows.
"""

from __future__ import annotations

import secrets
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from sandgate.audit import AuditLog, build_audit
from sandgate.config import Config
from sandgate.guest import build_zipapp
from sandgate.runtimes import Runtime
from sandgate.runtimes.select import select
from sandgate.sandboxes.hooks import LifecycleObserver, NetworkUpdater, SandboxHook, VolumeLender
from sandgate.sandboxes.service import AuditSink, SandboxService
from sandgate.secrets import SecretStore
from sandgate.store import Store
from sandgate.telemetry import Telemetry

__all__ = ["SandboxAdmin", "build_sandbox_service", "instance_id", "open_sandbox_admin"]


def instance_id(home: Path) -> str:
    """This installation's id; labels its sandboxes so two servers never adopt each other's."""
    path = home / "instance-id"
    if not path.exists():
        path.write_text(secrets.token_hex(8))
    return path.read_text().strip()


def build_sandbox_service(
    config: Config,
    store: Store,
    runtime: Runtime,
    *,
    audit: AuditSink | None,
    observers: Sequence[LifecycleObserver] = (),
    hooks: Sequence[SandboxHook] = (),
    network: NetworkUpdater | None = None,
    volumes: VolumeLender | None = None,
) -> SandboxService:
    """The lifecycle service of ``config``'s home: its instance id and its guest zipapp."""
    home = config.home_dir
    return SandboxService(
        config,
        store,
        runtime,
        instance_id=instance_id(home),
        guest_zipapp=build_zipapp(home / "guest" / "guest.pyz"),
        hooks=hooks,
        audit=audit,
        network=network,
        volumes=volumes,
        observers=observers,
    )


@dataclass
class SandboxAdmin:
    """What an operator command on the host manages sandboxes with. A sandbox it kills is
    ended as the server would end it: its last logs collected, its runtime sandbox and host
    directory removed, its row marked killed, an audit record and a sandbox-log entry
    written. Per-sandbox sockets (tools, egress) belong to the server process, which closes
    them when it notices."""

    store: Store
    runtime: Runtime
    audit: AuditLog
    sandboxes: SandboxService

    def close(self) -> None:
        """Writes what the audit log has queued, then closes the store."""
        self.audit.close()
        self.store.close()


def open_sandbox_admin(config: Config) -> SandboxAdmin:
    """Opens the store (migrating it), the runtime and the audit log of ``config``; raises
    ``SandgateError`` (``RuntimeUnavailable`` with the fix when no runtime is usable)."""
    home = config.home_dir
    home.mkdir(parents=True, exist_ok=True, mode=0o700)
    store = Store.open(config.store_url)
    runtime, _ = select(config, instance_id(home))
    audit = build_audit(config, store, SecretStore(config.secrets))
    # As at the server's start: a tampered log is reported, and refuses every append.
    audit.check_head()
    telemetry = Telemetry(
        config.metrics,
        config.sandbox_logs,
        store,
        runtime,
        lambda sandbox_id: service.guest_of(sandbox_id),
    )

    service = build_sandbox_service(
        config, store, runtime, audit=audit.queue, observers=[telemetry]
    )
    return SandboxAdmin(store, runtime, audit, service)
