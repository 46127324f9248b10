"""OpenTelemetry spans for one request's path: HTTP edge → sandbox create, guest calls, tool
calls (policy decision, execution). Off by default.

The hooks in the services call ``span(name, **attributes)``; while tracing is off it returns
one shared no-op context manager, and ``opentelemetry`` is never imported (the CLI and the
server's start pay nothing). ``install`` turns it on for this process with a tracer provider
of its own (not OTel's process-global provider, which can be set only once: tests install an
in-memory exporter, servers an OTLP one). Spans nest through ``contextvars``, so a span opened
in a request's task is the parent of those its awaits open.

A trace crosses the sandbox by the W3C ``traceparent`` form: a process the gateway starts in a
sandbox gets the current span's as ``TRACEPARENT`` (OpenTelemetry's environment carrier), the
tool clients inside send it back with each call, and the ``tool.call`` span continues it. What
comes back from a sandbox is only ever a parent to link to, parsed strictly (W3C version 00,
non-zero ids); anything else is ignored.
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SpanExporter
    from opentelemetry.trace import Tracer

__all__ = [
    "Span",
    "enabled",
    "install",
    "otlp_provider",
    "provider_for_exporter",
    "span",
    "traceparent",
    "uninstall",
]

#: W3C trace context, version 00: ``00-<32 hex trace id>-<16 hex span id>-<2 hex flags>``.
_TRACEPARENT = re.compile(r"00-(?!0{32})[0-9a-f]{32}-(?!0{16})[0-9a-f]{16}-[0-9a-f]{2}")

_tracer: Tracer | None = None
_provider: TracerProvider | None = None


class Span:
    """What a hook may do with its span: add attributes once it knows them (``None`` values
    are left out). The no-op variant is shared while tracing is off."""

    def __init__(self, inner: Any = None) -> None:
        self._inner = inner

    def set(self, **attributes: Any) -> None:
        if self._inner is None:
            return
        for key, value in attributes.items():
            if value is not None:
                self._inner.set_attribute(key.replace("__", "."), value)


_NOOP = Span()


def enabled() -> bool:
    return _tracer is not None


@contextlib.contextmanager
def span(name: str, *, parent: str | None = None, **attributes: Any) -> Iterator[Span]:
    """A child of the current span (or a new trace). ``parent``, a ``traceparent`` value that
    came from elsewhere (a sandbox), is the parent instead when it is well formed. Attribute
    names use ``__`` for ``.`` (``sandbox__id`` → ``sandbox.id``). Exceptions are recorded on
    the span and re-raised."""
    tracer = _tracer
    if tracer is None:
        yield _NOOP
        return
    context = _remote_parent(parent) if parent is not None else None
    with tracer.start_as_current_span(name, context=context) as inner:
        handle = Span(inner)
        handle.set(**attributes)
        yield handle


def traceparent() -> str | None:
    """The current span as a W3C ``traceparent`` value, for a process started in a sandbox;
    ``None`` while tracing is off or outside any span."""
    if _tracer is None:
        return None
    from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

    carrier: dict[str, str] = {}
    TraceContextTextMapPropagator().inject(carrier)
    return carrier.get("traceparent")


def _remote_parent(value: str) -> Any:
    """The context whose parent ``value`` names, or ``None`` (the current context) unless
    ``value`` is exactly a version-00 ``traceparent`` with non-zero ids."""
    # SECURITY: the value comes from code in a sandbox; it may only choose which trace its
    # calls join, and only in the strict W3C form (no tracestate, no baggage, no other keys).
    if not isinstance(value, str) or _TRACEPARENT.fullmatch(value) is None:
        return None
    from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

    return TraceContextTextMapPropagator().extract({"traceparent": value})


def install(provider: TracerProvider) -> None:
    """Sends this process's spans to ``provider`` from now on."""
    global _tracer, _provider
    _provider = provider
    _tracer = provider.get_tracer("sandgate")


def uninstall() -> None:
    """Turns tracing off again, flushing and shutting down the provider."""
    global _tracer, _provider
    provider, _tracer, _provider = _provider, None, None
    if provider is not None:
        provider.shutdown()


def otlp_provider(service_name: str, endpoint: str | None) -> TracerProvider:
    """A provider that batches spans to an OTLP/HTTP collector: ``endpoint`` (the traces URL,
    e.g. ``http://collector:4318/v1/traces``) or, when ``None``, what the standard
    ``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT``/``OTEL_EXPORTER_OTLP_ENDPOINT`` variables say."""
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

    exporter: SpanExporter = OTLPSpanExporter(endpoint=endpoint)
    return _provider_with(service_name, exporter, batch=True)


def _provider_with(service_name: str, exporter: SpanExporter, *, batch: bool) -> TracerProvider:
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor, SimpleSpanProcessor

    provider = TracerProvider(resource=Resource.create({"service.name": service_name}))
    processor = BatchSpanProcessor(exporter) if batch else SimpleSpanProcessor(exporter)
    provider.add_span_processor(processor)
    return provider


def provider_for_exporter(service_name: str, exporter: SpanExporter) -> TracerProvider:
    """A provider that hands each span to ``exporter`` as it ends (tests, debugging)."""
    return _provider_with(service_name, exporter, batch=False)
