"""The audit log: append-only JSONL, hash-chained, anchored in the store (and optionally in a
signed checkpoint file), written by one writer thread with group commit, indexed in the store."""

from sandgate.audit._build import build_audit
from sandgate.audit.chain import GENESIS, VerifyResult, canonical, seal, verify_lines
from sandgate.audit.checkpoint import Checkpointer, read_checkpoints
from sandgate.audit.log import AuditHealth, AuditLog, AuditState
from sandgate.audit.verify import RECOVERED_EVENT, verify_log

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
