"""What an operator's monitoring sees of a server: Prometheus metrics (``GET /metrics``,
``metrics``), OpenTelemetry traces (``tracing``, off by default) and the HTTP edge that feeds
both (``edge``), per the ``observability`` section of the config.

Nothing is imported here: services import ``sandgate.observability.tracing`` for their spans,
and that must stay free of ``prometheus_client`` and ``opentelemetry`` while tracing is off.
"""
