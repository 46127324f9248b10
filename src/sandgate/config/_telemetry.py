"""What Sandgate records about each sandbox for E2B's metrics and logs endpoints.

Both are kept in the store (SQLite or PostgreSQL), so they outlive the sandbox and a gateway
restart; both are bounded, so no tenant can grow them into host disk pressure: metrics by
their retention (rows per sandbox = retention / interval, sampled only while it runs), logs by
a ring per sandbox and a cap on the whole table.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

__all__ = ["MetricsConfig", "ObservabilityConfig", "SandboxLogsConfig"]


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class MetricsConfig(_Section):
    """``GET /sandboxes/{id}/metrics``: CPU, memory and disk of running sandboxes."""

    #: Seconds between two samples of every running sandbox (one task reads all of them in a
    #: batch: their cgroup counters and their disk). A sandbox is also sampled the moment it
    #: starts or resumes, so its metrics are never empty.
    interval_s: float = Field(5.0, ge=0.2, le=3600)
    #: Hours a sample is kept (also after its sandbox ended).
    retention_hours: float = Field(24.0, gt=0, le=24 * 90)


class SandboxLogsConfig(_Section):
    """``GET /sandboxes/{id}/logs`` and ``/v2/...``: lifecycle events and process output."""

    #: Seconds between two collections of every running sandbox's process log (its guest
    #: keeps a bounded journal meanwhile). Logs are also collected before a sandbox is paused
    #: or killed, and whenever someone reads the logs of a running sandbox.
    collect_interval_s: float = Field(5.0, ge=0.2, le=3600)
    #: Hours a log entry is kept (also after its sandbox ended; E2B keeps seven days).
    retention_hours: float = Field(24.0, gt=0, le=24 * 90)
    #: A ring per sandbox: beyond this many entries its oldest go first.
    max_entries_per_sandbox: int = Field(1000, ge=10, le=100_000)
    #: The whole table (every sandbox, running or ended): beyond this size the oldest entries
    #: go first, whichever sandbox they belong to.
    max_total_mib: int = Field(256, ge=1)


class ObservabilityConfig(_Section):
    """What an operator's monitoring sees: ``GET /metrics`` (Prometheus) and OTLP traces.

    Both are off by default. ``/metrics`` holds no secret (counts, template and tool names,
    error codes) but says how busy the server is and what it runs, so it is served only when
    ``prometheus`` is on; scrapers carry no E2B key, so it asks for none, unless
    ``metrics_token`` is set: then ``Authorization: Bearer <token>`` is required (Prometheus'
    ``authorization: {credentials: ...}``). Set a token whenever the port is reachable from
    outside the monitoring network.
    """

    #: Serve ``GET /metrics`` on the server's port (the control plane; sandbox-routed
    #: requests never reach it).
    prometheus: bool = False
    #: When set, ``GET /metrics`` requires this bearer token (at least 16 characters).
    metrics_token: str | None = Field(None, min_length=16, max_length=512)
    #: Export OpenTelemetry traces over OTLP/HTTP.
    traces: bool = False
    #: The collector's traces URL (``http://collector:4318/v1/traces``); unset: the standard
    #: ``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT``/``OTEL_EXPORTER_OTLP_ENDPOINT`` variables, else
    #: the exporter's default (``http://localhost:4318/v1/traces``).
    otlp_endpoint: str | None = None
    #: The traces' ``service.name``.
    service_name: str = Field("sandgate", min_length=1, max_length=100)
