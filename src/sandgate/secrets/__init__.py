"""Gateway-held secrets: resolved on the host, given only to tool executions, redacted."""

from sandgate.secrets.redact import Redactor
from sandgate.secrets.store import SecretStore

__all__ = ["Redactor", "SecretStore"]
