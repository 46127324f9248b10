"""The per-sandbox gateway socket and its wire protocol.

Each sandbox gets its own Unix socket, ``<host_dir>/gateway.sock`` on the host and
``/run/sandgate/gateway.sock`` inside. The protocol is JSON lines, one request and one reply
per line, any number in turn on one connection::

    → {"tool": "kv", "arguments": {"op": "get", "key": "user:1"}, "idempotency_key": "k1",
       "traceparent": "00-…-…-01"}
    ← {"ok": true, "result": {...}, "truncated": false}
    ← {"ok": false, "error": {"code": "policy_denied", "message": "...", "status": 403}}

``idempotency_key`` is optional; so is ``traceparent`` (W3C form, from the ``TRACEPARENT`` the
gateway gave the calling process), the span the call's trace continues while tracing is on. A
line longer than ``MAX_LINE`` gets an ``invalid_request`` reply, a line that is not a strict
JSON object (``sandgate.strictjson``: a duplicate key at any depth, ``NaN``, a lone surrogate,
invalid UTF-8, nesting deeper than its cap, an integer outside int64) an ``invalid_json`` reply;
either way the connection is closed and no tool runs.

SECURITY: the caller is the sandbox the socket belongs to (``subject`` is fixed when the
socket is created, from the store row); nothing in a request can name another sandbox, team or
agent. The socket is mode 0666 because the sandbox's unprivileged user must connect to it;
only that sandbox sees it (its own mount). There are no other routes here: no admin, reload or
metrics (GW-14).
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import structlog

from sandgate.errors import InvalidJson
from sandgate.policy import Subject
from sandgate.sandboxes.listener import SandboxListener
from sandgate.strictjson import StrictJsonError, loads_object
from sandgate.tools.pipeline import Gateway

__all__ = ["MAX_LINE", "GatewaySocket"]

log = structlog.get_logger("sandgate.tools")

MAX_LINE = 4 * 1024 * 1024


class GatewaySocket(SandboxListener):
    read_limit = MAX_LINE

    def __init__(self, gateway: Gateway, subject: Subject) -> None:
        super().__init__()
        self._gateway = gateway
        self._subject = subject

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        if task is not None:
            self._tasks.add(task)
        try:
            while True:
                try:
                    line = await reader.readline()
                except (ValueError, asyncio.LimitOverrunError):
                    await _reply(writer, _invalid(f"request line longer than {MAX_LINE} bytes"))
                    return
                if not line:
                    return
                try:
                    request = loads_object(line)
                except StrictJsonError as exc:
                    error = InvalidJson(exc.describe("the request line"))
                    await _reply(writer, _refusal(error.code, error.message))
                    return
                parent = request.get("traceparent")
                result = await self._gateway.call(
                    self._subject,
                    request.get("tool"),
                    request.get("arguments", {}),
                    request.get("idempotency_key"),
                    traceparent=parent if isinstance(parent, str) else None,
                )
                await _reply(writer, result.wire())
        except (ConnectionError, asyncio.IncompleteReadError):
            return
        finally:
            writer.close()
            if task is not None:
                self._tasks.discard(task)


def _invalid(message: str) -> dict[str, Any]:
    return _refusal("invalid_request", message)


def _refusal(code: str, message: str) -> dict[str, Any]:
    return {"ok": False, "error": {"code": code, "message": message, "status": 400}}


async def _reply(writer: asyncio.StreamWriter, body: dict[str, Any]) -> None:
    writer.write(json.dumps(body, default=str).encode() + b"\n")
    await writer.drain()
