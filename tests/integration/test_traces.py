"""OpenTelemetry traces (issue 16) from a real server to an OTLP/HTTP collector on loopback.

The collector is this test's own (protobuf ``ExportTraceServiceRequest`` bodies, parsed with
``opentelemetry-proto``): the server's exporter is the one operators use. A create is one
trace from the HTTP request through ``sandbox.create`` to the guest; a tool call made from the
sandbox is a ``tool.call`` span with its policy decision and its execution as children, and
the sandbox and agent ids as attributes; it continues the trace of the request whose process
made it (``TRACEPARENT`` in, ``traceparent`` back on the gateway socket). An agent run is one
``agent.run`` span with its model calls, code and the code's tool calls below it, all carrying
the run's id.
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
from tests.framework.model_server import ScriptedModelServer, code, text
from tests.framework.sandbox_http import wait_for

AGENT = "traced-agent"
MODEL = "traced-model"


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
def models() -> Iterator[ScriptedModelServer]:
    server = ScriptedModelServer().start()
    yield server
    server.stop()


@pytest.fixture(scope="module")
def server(
    runtime_server_factory: Any, collector: tuple[Collector, int], models: ScriptedModelServer
) -> RunningServer:
    _, port = collector
    started: RunningServer = runtime_server_factory(
        config={
            "agents": [{"id": AGENT, "model": MODEL}],
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
        extra_env={
            "OTEL_BSP_SCHEDULE_DELAY": "50",
            "OPENAI_BASE_URL": models.openai_url,
            "OPENAI_API_KEY": "sk-test",
        },
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
        # Its parent is the HTTP request's span, the root of the trace. That span ends after
        # its child, so the batch processor may send it in a later export: wait for it too.
        (edge,) = wait_for(
            lambda: spans.where(lambda s: s.span_id == created.parent_id),
            30,
            "the create request's span",
        )
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
        # ends with the response stream, after the call's). The call continues its trace:
        # the process got the request's span as TRACEPARENT and its tool client sent it back.
        (command,) = wait_for(
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
        assert call.trace_id == command.trace_id
        assert call.parent_id == command.span_id
    finally:
        httpx.delete(f"{server.url}/sandboxes/{sandbox_id}", headers={"X-API-Key": server.api_key})


def test_an_agent_run_is_one_trace_with_its_run_id(
    server: RunningServer, collector: tuple[Collector, int], models: ScriptedModelServer
) -> None:
    spans, _ = collector
    models.script(
        MODEL,
        code("import sandgate_tools as tools\nprint(tools.kv.get(key='traced:run'))"),
        text("Done."),
    )
    headers = {"X-API-Key": server.api_key}
    started = httpx.post(
        f"{server.url}/v1/agents/{AGENT}/runs", json={"message": "Look it up."}, headers=headers
    )
    assert started.status_code == 201, started.text
    run_id = started.json()["id"]
    # A bound that only catches a hang: a poll has taken over httpx's default 5 s on a
    # loaded 2-core machine while the run started its sandbox.
    with httpx.Client(headers=headers, timeout=60) as http:
        final = wait_for(
            lambda: (
                body
                if (body := http.get(f"{server.url}/v1/runs/{run_id}").json())["state"]
                not in ("queued", "running")
                else None
            ),
            180,
            "the end of the run",
        )
    assert final["state"] == "completed", final
    assert final["usage"]["tool_calls"] == 1

    (root,) = wait_for(
        lambda: spans.where(
            lambda s: s.name == "agent.run" and s.attributes.get("run.id") == run_id
        ),
        30,
        "the agent.run span",
    )
    assert root.attributes["agent"] == AGENT
    (submitted,) = wait_for(
        lambda: spans.where(lambda s: s.span_id == root.parent_id),
        30,
        "the span of the request that started the run",
    )
    assert submitted.name == "HTTP POST" and submitted.attributes["url.path"].endswith("/runs")
    below = {s.name: s for s in spans.children(root)}
    model = spans.where(lambda s: s.name == "agent.model" and s.parent_id == root.span_id)
    assert [m.attributes["step"] for m in model] == [1, 2]
    assert all(m.attributes["tokens.prompt"] > 0 for m in model)
    block = below["agent.code"]
    assert block.attributes["language"] == "python" and block.attributes["exit_code"] == 0
    # The tool call the code made is below the code's span, in the same trace, with the
    # run's id (the sandbox's active run: no workflow involved).
    (call,) = wait_for(
        lambda: spans.where(
            lambda s: s.name == "tool.call" and s.attributes.get("run.id") == run_id
        ),
        30,
        "the run's tool.call span",
    )
    assert call.trace_id == root.trace_id and call.parent_id == block.span_id
    assert call.attributes["agent"] == AGENT and call.attributes["tool"] == "kv"
