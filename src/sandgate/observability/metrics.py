"""Prometheus metrics of one server: ``GET /metrics`` on the server's port.

One ``CollectorRegistry`` per ``Metrics`` (so per ``Application``), never the process-global
default: two servers in one process (tests) would otherwise count each other's work.
Counters and histograms are moved by the few hooks that see the events (sandbox create, the
lifecycle observer, the tool pipeline, the audit writer, the HTTP edge); gauges (sandboxes by
state, warm pools, pending approvals) are read from their owners at scrape time, so they can
never drift from the truth.

Label values are bounded: a tool is labelled by its registered name only (an unknown name a
caller made up counts as ``unknown``), templates by the name the create resolved (``-`` when
it resolved none), errors by the stable error codes of ``sandgate.errors``.
"""

from __future__ import annotations

import hmac
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any, Final

import structlog
from prometheus_client import CollectorRegistry, Counter, Histogram
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.exposition import choose_encoder
from prometheus_client.registry import Collector
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from sandgate.store import Sandbox, Store

__all__ = ["Metrics"]

log = structlog.get_logger("sandgate.observability")

#: Egress audit events that record a decision (the rest are attach/update/close notes).
_EGRESS_DECISIONS: Final = {"egress.connect": "connect", "egress.request": "request"}
_CREATE_BUCKETS: Final = (0.1, 0.25, 0.5, 1, 2, 5, 10, 20, 60, 120)
_AUDIT_BUCKETS: Final = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1, 5)


class Metrics:
    """The server's instruments and its ``/metrics`` endpoint (``endpoint``)."""

    def __init__(
        self,
        store: Store,
        *,
        pools: Callable[[], Mapping[str, int]],
        approvals_pending: Callable[[], int],
        token: str | None = None,
    ) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        self._token = token
        self.sandbox_creates = Counter(
            "sandgate_sandbox_creates",
            "Sandbox creates, by template and outcome (ok or the error code).",
            ["template", "outcome"],
            registry=self.registry,
        )
        self.sandbox_create_seconds = Histogram(
            "sandgate_sandbox_create_seconds",
            "Time from a create request to a sandbox whose guest answers (or to its error).",
            ["template"],
            buckets=_CREATE_BUCKETS,
            registry=self.registry,
        )
        self.commands_started = Counter(
            "sandgate_commands_started",
            "Processes started in sandboxes (E2B commands and PTYs).",
            registry=self.registry,
        )
        self.tool_calls = Counter(
            "sandgate_tool_calls",
            "Tool calls through the gateway pipeline, by tool and audited outcome.",
            ["tool", "outcome"],
            registry=self.registry,
        )
        self.egress_decisions = Counter(
            "sandgate_egress_decisions",
            "Egress proxy decisions, by kind (connect, request) and outcome (allowed, denied).",
            ["kind", "outcome"],
            registry=self.registry,
        )
        self.audit_append_seconds = Histogram(
            "sandgate_audit_append_seconds",
            "Time from handing a record to the audit log to its being durable (fsynced).",
            buckets=_AUDIT_BUCKETS,
            registry=self.registry,
        )
        self.http_errors = Counter(
            "sandgate_http_errors",
            "Error answers at the HTTP edge, by status and error code.",
            ["status", "code"],
            registry=self.registry,
        )
        self.registry.register(_Gauges(store, pools, approvals_pending))

    # -- hooks ----------------------------------------------------------------------------

    def sandbox_created(self, template: str, outcome: str, seconds: float) -> None:
        self.sandbox_creates.labels(template, outcome).inc()
        self.sandbox_create_seconds.labels(template).observe(seconds)

    def tool_call(self, tool: str | None, outcome: str) -> None:
        self.tool_calls.labels(tool or "unknown", outcome).inc()

    def http_error(self, status: int, code: str) -> None:
        self.http_errors.labels(str(status), code).inc()

    def audit_committed(self, record: Mapping[str, Any], seconds: float) -> None:
        """Called by the audit writer (its thread, or serve's event loop) for each durable
        record."""
        self.audit_append_seconds.observe(seconds)
        kind = _EGRESS_DECISIONS.get(str(record.get("event")))
        outcome = record.get("outcome")
        if kind is not None and outcome in ("allowed", "denied"):
            self.egress_decisions.labels(kind, outcome).inc()

    # LifecycleObserver (sandboxes.hooks): commands started.
    async def on_event(self, event: str, sandbox: Sandbox, detail: Mapping[str, Any]) -> None:
        if event == "command.started":
            self.commands_started.inc()

    async def before_stop(self, sandbox: Sandbox) -> None:
        return None

    # -- GET /metrics ---------------------------------------------------------------------

    async def endpoint(self, request: Request) -> Response:
        """The Prometheus text format (OpenMetrics when the scraper's ``Accept`` asks).
        With ``observability.metrics_token`` set, only a request carrying
        ``Authorization: Bearer <token>`` gets it (401 otherwise)."""
        if self._token is not None:
            given = request.headers.get("authorization", "")
            scheme, _, value = given.partition(" ")
            # SECURITY: constant-time comparison; a wrong and a missing token answer alike.
            if scheme.lower() != "bearer" or not hmac.compare_digest(
                value.strip().encode(), self._token.encode()
            ):
                return JSONResponse(
                    {
                        "code": 401,
                        "message": "GET /metrics needs 'Authorization: Bearer <token>' with "
                        "the token of observability.metrics_token",
                        "error_code": "unauthenticated",
                    },
                    status_code=401,
                    headers={"WWW-Authenticate": "Bearer"},
                )
        # The format the scraper asks for (Prometheus text, or OpenMetrics when accepted).
        encode, content_type = choose_encoder(request.headers.get("accept", ""))
        return Response(encode(self.registry), headers={"Content-Type": content_type})


class _Gauges(Collector):
    """Gauges read from their owners at each scrape."""

    def __init__(
        self,
        store: Store,
        pools: Callable[[], Mapping[str, int]],
        approvals_pending: Callable[[], int],
    ) -> None:
        self._store = store
        self._pools = pools
        self._approvals_pending = approvals_pending

    def describe(self) -> Iterable[Metric]:
        return self._families()

    def collect(self) -> Iterable[Metric]:
        return self._families(read=True)

    def _families(self, *, read: bool = False) -> Iterator[Metric]:
        sandboxes = GaugeMetricFamily(
            "sandgate_sandboxes",
            "Sandboxes the server keeps (running, paused, ...), by state and runtime.",
            labels=["state", "runtime"],
        )
        pools = GaugeMetricFamily(
            "sandgate_warm_pool_sandboxes",
            "Started sandboxes waiting in a template's warm pool.",
            labels=["template"],
        )
        pending = GaugeMetricFamily(
            "sandgate_approvals_pending", "Tool calls waiting for a human's approval."
        )
        if read:
            counts: dict[tuple[str, str], int] = {}
            for row in self._store.kept_sandboxes():
                key = (row.state, row.runtime)
                counts[key] = counts.get(key, 0) + 1
            for (state, runtime), count in sorted(counts.items()):
                sandboxes.add_metric([state, runtime], count)
            for template, size in sorted(self._pools().items()):
                pools.add_metric([template], size)
            pending.add_metric([], self._approvals_pending())
        yield from (sandboxes, pools, pending)
