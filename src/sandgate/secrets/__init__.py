"""Gateway-held secrets: the operator's (config, given to tool executions) and each team's
(API, used by the egress proxy for that team's sandboxes); resolved on the host, redacted."""

from sandgate.secrets.redact import Redactor
from sandgate.secrets.store import SecretStore
from sandgate.secrets.team import SecretPage, SecretUnreadable, TeamSecrets

__all__ = ["Redactor", "SecretPage", "SecretStore", "SecretUnreadable", "TeamSecrets"]
