"""OpenTelemetry traces (issue 16) from a real server to an OTLP/HTTP collector on loopback.

The collector is this test's own (protobuf ``ExportTraceServiceRequest`` bodies, parsed with
``opentelemetry-proto``): the server's exporter is the one operators use. A create is one
trace from the HTTP request through ``sandbox.create`` to the guest; a tool call made from the
sandbox is a ``tool.call`` span with its policy decision and its execution as children, and
the sandbox and agent ids as attributes.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import httpx
import pytest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from tests.fixtures.server import RunningServer
from tests.framework.envd import create, run
from tests.framework.sandbox_http import wait_for

AGENT = "traced-agent"


@dataclass(frozen=True)
class Span:
    name: str
    trace_id: str
    span_id: str
    parent_id: str
    attributes: dict[str, Any]


class Collector:
    """Spans received on ``POST /v1/traces``, in arrival order."""

    def __init__(self) -> None:
        self.spans: list[Span] = []
        self._lock = threading.Lock()

    def add(self, body: bytes) -> None:
        request = ExportTraceServiceRequest.FromString(body)
        found = [
            Span(
                span.name,
                span.trace_id.hex(),
                span.span_id.hex(),
                span.parent_span_id.hex(),
                {a.key: _value(a.value) for a in span.attributes},
            )
            for resource in request.resource_spans
            for scope in resource.scope_spans
            for span in scope.spans
        ]
        with self._lock:
            self.spans.extend(found)

    def where(self, match: Callable[[Span], bool]) -> list[Span]:
        with self._lock:
            return [span for span in self.spans if match(span)]

    def children(self, parent: Span) -> list[Span]:
        return self.where(lambda s: s.parent_id == parent.span_id)


def _value(value: Any) -> Any:
    kind = value.WhichOneof("value")
    return getattr(value, kind) if kind else None


@pytest.fixture(scope="module")
def collector() -> Iterator[tuple[Collector, int]]:
    received = Collector()

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers["Content-Length"]))
            received.add(body)
            self.send_response(200)
            self.send_header("Content-Type", "application/x-protobuf")
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *args: Any) -> None:
            return

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield received, server.server_address[1]
    server.shutdown()
    server.server_close()


@pytest.fixture(scope="module")
def server(runtime_server_factory: Any, collector: tuple[Collector, int]) -> RunningServer:
    _, port = collector
    started: RunningServer = runtime_server_factory(
        config={
            "agents": [{"id": AGENT}],
            "tools": [{"name": "kv", "kind": "builtin"}],
            "policy": {
                "rules": [
                    {"id": "reads", "effect": "allow", "subject": {"agent": AGENT}, "tool": "kv"}
                ]
            },
            "observability": {
                "traces": True,
                "otlp_endpoint": f"http://127.0.0.1:{port}/v1/traces",
                "service_name": "sandgate-test",
            },
        },
        # The batch processor's delay: spans reach the collector within 50 ms of ending.
        extra_env={"OTEL_BSP_SCHEDULE_DELAY": "50"},
    )
    return started


def test_create_and_tool_call_traces(
    server: RunningServer, collector: tuple[Collector, int]
) -> None:
    spans, _ = collector
    box = create(server.url, server.api_key, timeout=300, metadata={"sandgate.agent": AGENT})
    sandbox_id = box["sandboxID"]
    try:
        created = wait_for(
            lambda: spans.where(
                lambda s: (
                    s.name == "sandbox.create" and s.attributes.get("sandbox.id") == sandbox_id
                )
            ),
            30,
            "the sandbox.create span",
        )[0]
        # Its parent is the HTTP request's span, the root of the trace.
        (edge,) = spans.where(lambda s: s.span_id == created.parent_id)
        assert edge.name == "HTTP POST" and edge.parent_id == ""
        assert edge.trace_id == created.trace_id
        assert edge.attributes["url.path"] == "/v2/sandboxes"
        assert edge.attributes["http.status_code"] == 201
        # The guest calls of the create are its children, with the sandbox's id.
        guest = [s for s in spans.children(created) if s.name.startswith("guest.")]
        assert guest and {s.attributes["sandbox.id"] for s in guest} == {sandbox_id}

        result = run(server.url, sandbox_id, box["envdAccessToken"], "kv get traced:1")
        assert result.exit_code == 0, result.stderr
        call = wait_for(
            lambda: spans.where(
                lambda s: s.name == "tool.call" and s.attributes.get("sandbox.id") == sandbox_id
            ),
            30,
            "the tool.call span",
        )[0]
        assert call.attributes["agent"] == AGENT
        assert call.attributes["tool"] == "kv" and call.attributes["outcome"] == "allowed"
        stages = {s.name: s for s in spans.children(call)}
        assert stages["tool.policy"].attributes["effect"] == "allow"
        assert stages["tool.policy"].attributes["rule"] == "reads"
        assert stages["tool.execute"].attributes["tool"] == "kv"
        assert {s.trace_id for s in stages.values()} == {call.trace_id}
        # The command that made the call: an envd request routed to this sandbox (its span
        # ends with the response stream, after the call's).
        wait_for(
            lambda: spans.where(
                lambda s: (
                    s.name == "HTTP POST"
                    and s.attributes.get("sandbox.id") == sandbox_id
                    and s.attributes["url.path"] == "/process.Process/Start"
                )
            ),
            30,
            "the span of the command's envd request",
        )
    finally:
        httpx.delete(f"{server.url}/sandboxes/{sandbox_id}", headers={"X-API-Key": server.api_key})
