"""Opening the audit log a configuration describes (used by ``serve``, the CLI and doctor;
kept here so reading the log never imports the tool gateway)."""

from __future__ import annotations

from pathlib import Path

from sandgate.audit.checkpoint import Checkpointer
from sandgate.audit.log import AuditLog
from sandgate.config import Config
from sandgate.secrets import SecretStore
from sandgate.store import Store

__all__ = ["build_audit"]


def build_audit(config: Config, store: Store | None, secrets: SecretStore) -> AuditLog:
    """The audit log of ``config``'s home, with its signed checkpoint when configured.
    Raises ``ToolFailed`` when the checkpoint's key secret cannot be read."""
    checkpoint = config.audit.checkpoint
    checkpointer = None
    if checkpoint is not None:
        key = secrets.resolve([checkpoint.key_secret])[checkpoint.key_secret].encode()
        checkpointer = Checkpointer(
            Path(checkpoint.path).expanduser(), key, checkpoint.every_records, checkpoint.every_s
        )
    return AuditLog(
        config.home_dir / "audit", store, fsync=config.audit.fsync, checkpoint=checkpointer
    )
