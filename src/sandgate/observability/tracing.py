"""OpenTelemetry spans for one request's path: HTTP edge → sandbox create, guest calls, tool
calls (policy decision, execution). Off by default.

The hooks in the services call ``span(name, **attributes)``; while tracing is off it returns
one shared no-op context manager, and ``opentelemetry`` is never imported (the CLI and the
server's start pay nothing). ``install`` turns it on for this process with a tracer provider
of its own (not OTel's process-global provider, which can be set only once: tests install an
in-memory exporter, servers an OTLP one). Spans nest through ``contextvars``, so a span opened
in a request's task is the parent of those its awaits open.
"""

from __future__ import annotations

import contextlib
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
    "uninstall",
]

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
def span(name: str, **attributes: Any) -> Iterator[Span]:
    """A child of the current span (or a new trace). Attribute names use ``__`` for ``.``
    (``sandbox__id`` → ``sandbox.id``). Exceptions are recorded on the span and re-raised."""
    tracer = _tracer
    if tracer is None:
        yield _NOOP
        return
    with tracer.start_as_current_span(name) as inner:
        handle = Span(inner)
        handle.set(**attributes)
        yield handle


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
