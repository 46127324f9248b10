"""The audit log: append-only JSONL, hash-chained, anchored in the store (and optionally in a
signed checkpoint file), written by one writer thread with group commit (``serve``: handing
the batches to a writer process), indexed in the store."""

from typing import TYPE_CHECKING, Any

from sandgate.audit.chain import GENESIS, VerifyResult, canonical, seal, verify_lines
from sandgate.audit.checkpoint import Checkpointer, read_checkpoints
from sandgate.audit.log import AuditHealth, AuditLog, AuditState
from sandgate.audit.verify import RECOVERED_EVENT, verify_log

if TYPE_CHECKING:
    from sandgate.audit._build import build_audit

__all__ = [
    "GENESIS",
    "RECOVERED_EVENT",
    "AuditHealth",
    "AuditLog",
    "AuditState",
    "Checkpointer",
    "VerifyResult",
    "build_audit",
    "canonical",
    "read_checkpoints",
    "seal",
    "verify_lines",
    "verify_log",
]


def __getattr__(name: str) -> Any:
    # ``build_audit`` reads the configuration: imported when first used, so the writer
    # process (which needs only the log) starts without the configuration's models.
    if name == "build_audit":
        from sandgate.audit._build import build_audit

        return build_audit
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
