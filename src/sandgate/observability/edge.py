"""The HTTP edge's observer: a span per request (the root of its trace) and the error count
by status and code. It wraps the outermost router, so it sees control-plane, envd and port
traffic alike, and only watches: bodies pass through untouched (an error body is peeked at,
never held back, to read its stable ``error_code``)."""

from __future__ import annotations

import json
from typing import Any, Final

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from sandgate.api.routing import ENVD_PORT
from sandgate.observability import tracing
from sandgate.observability.metrics import Metrics

__all__ = ["Edge"]

#: Error bodies longer than this are not parsed for their code (ours are a few hundred bytes).
_PEEK_LIMIT: Final = 16 * 1024


class Edge:
    def __init__(self, app: ASGIApp, metrics: Metrics | None) -> None:
        self._app = app
        self._metrics = metrics

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] not in ("http", "websocket"):
            await self._app(scope, receive, send)
            return
        status = 0
        peeked = False

        async def watched(message: Message) -> None:
            nonlocal status, peeked
            if message["type"] == "http.response.start":
                status = int(message["status"])
            elif message["type"] == "http.response.body" and not peeked and status >= 400:
                peeked = True
                # SECURITY: a sandbox's own server (a relayed port) writes what it likes:
                # its bodies never name a label value, or it could grow the registry.
                own = scope.get("sandgate.port", ENVD_PORT) == ENVD_PORT
                self._count_error(status, message.get("body", b"") if own else b"")
            await send(message)

        method = str(scope.get("method", "WS"))
        with tracing.span(f"HTTP {method}", http__method=method, url__path=scope["path"]) as span:
            try:
                await self._app(scope, receive, watched)
            finally:
                route = scope.get("sandgate.route")
                span.set(
                    http__status_code=status or None,
                    sandbox__id=getattr(route, "sandbox_id", None),
                )
        if status >= 400 and not peeked:
            self._count_error(status, b"")

    def _count_error(self, status: int, body: bytes) -> None:
        if self._metrics is not None:
            self._metrics.http_error(status, _code_of(status, body))


def _code_of(status: int, body: bytes) -> str:
    """The body's ``error_code`` (ours), else its Connect ``code`` (envd), else the status.
    Only Sandgate's own answers are read (control plane and envd)."""
    if body and len(body) <= _PEEK_LIMIT:
        try:
            data: Any = json.loads(body)
        except ValueError:
            data = None
        if isinstance(data, dict):
            for key in ("error_code", "code"):
                value = data.get(key)
                if isinstance(value, str) and value.replace("_", "").isalnum() and len(value) < 64:
                    return value
    return f"http_{status}"
