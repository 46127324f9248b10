"""The trace context a sandbox sends back with a tool call: only the strict W3C form may
choose the call's parent; anything else is ignored (the span stays where it would be)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from sandgate.observability import tracing

TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"
PARENT = "00f067aa0ba902b7"


@pytest.fixture
def exporter() -> Iterator[InMemorySpanExporter]:
    exporter = InMemorySpanExporter()
    tracing.install(tracing.provider_for_exporter("test", exporter))
    yield exporter
    tracing.uninstall()


def test_a_well_formed_traceparent_is_the_parent(exporter: InMemorySpanExporter) -> None:
    with tracing.span("tool.call", parent=f"00-{TRACE}-{PARENT}-01"):
        pass
    (span,) = exporter.get_finished_spans()
    assert span.context is not None and span.parent is not None
    assert f"{span.context.trace_id:032x}" == TRACE
    assert f"{span.parent.span_id:016x}" == PARENT


@pytest.mark.parametrize(
    "value",
    [
        f"01-{TRACE}-{PARENT}-01",  # another version
        f"00-{'0' * 32}-{PARENT}-01",  # zero trace id
        f"00-{TRACE}-{'0' * 16}-01",  # zero span id
        f"00-{TRACE.upper()}-{PARENT}-01",  # not lower-case hex
        f"00-{TRACE}-{PARENT}-01-extra",
        f" 00-{TRACE}-{PARENT}-01",
        f"00-{TRACE}-{PARENT}-01\n",
        "",
        "x" * 10_000,
    ],
)
def test_anything_else_is_ignored(exporter: InMemorySpanExporter, value: str) -> None:
    with tracing.span("HTTP POST"), tracing.span("tool.call", parent=value):
        pass
    inner, root = exporter.get_finished_spans()
    assert inner.parent is not None and root.context is not None and inner.context is not None
    assert inner.parent.span_id == root.context.span_id  # the current span, not the value
    assert inner.context.trace_id == root.context.trace_id


def test_the_current_span_is_handed_out_as_a_traceparent(exporter: InMemorySpanExporter) -> None:
    assert tracing.traceparent() is None  # outside any span
    with tracing.span("agent.code"):
        value = tracing.traceparent()
    (span,) = exporter.get_finished_spans()
    assert span.context is not None
    assert value is not None
    assert value.startswith(f"00-{span.context.trace_id:032x}-{span.context.span_id:016x}-")


def test_while_tracing_is_off_nothing_is_handed_out() -> None:
    assert tracing.traceparent() is None
    with tracing.span("tool.call", parent=f"00-{TRACE}-{PARENT}-01") as span:
        span.set(tool="kv")  # the shared no-op
