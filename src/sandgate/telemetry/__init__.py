"""What Sandgate records about sandboxes for E2B's metrics and logs endpoints: CPU, memory and
disk samples (``metrics``) and lifecycle and process log entries (``logs``), kept bounded in
the store."""

from sandgate.telemetry.logs import LEVELS, SandboxLogs, level_at_least
from sandgate.telemetry.metrics import MetricsSampler
from sandgate.telemetry.service import Telemetry

__all__ = ["LEVELS", "MetricsSampler", "SandboxLogs", "Telemetry", "level_at_least"]
