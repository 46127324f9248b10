"""The audit log: append-only JSONL, hash-chained, fsynced, indexed in the store."""

from sandgate.audit.chain import GENESIS, VerifyResult, canonical, seal, verify_lines
from sandgate.audit.log import AuditLog

__all__ = ["GENESIS", "AuditLog", "VerifyResult", "canonical", "seal", "verify_lines"]
