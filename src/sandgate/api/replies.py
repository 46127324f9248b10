"""JSON answers that work on HTTP requests and on WebSocket upgrades alike.

A WebSocket upgrade refused before it is accepted must still get an honest status and body
(401 without the traffic token, 502 for a closed port), not ASGI's bare 403 nor the 500 that
sending ``http.response.start`` on a ``websocket`` scope provokes. ASGI servers that offer the
``websocket.http.response`` extension (uvicorn does) carry such a response; on any other the
upgrade is closed before acceptance (a 403 on the wire) as the last resort.
"""

from __future__ import annotations

import json
from collections.abc import Sequence

from starlette.types import Scope, Send

__all__ = ["send_json"]


async def send_json(
    scope: Scope,
    send: Send,
    status: int,
    body: dict[str, object],
    headers: Sequence[tuple[bytes, bytes]] = (),
) -> None:
    """Answers the request in ``scope`` with ``status`` and ``body`` as JSON."""
    payload = json.dumps(body).encode()
    start_headers = [
        (b"content-type", b"application/json"),
        (b"content-length", str(len(payload)).encode()),
        *headers,
    ]
    if scope["type"] == "websocket":
        if "websocket.http.response" not in scope.get("extensions", {}):
            await send({"type": "websocket.close", "code": 1008, "reason": ""})
            return
        await send(
            {
                "type": "websocket.http.response.start",
                "status": status,
                "headers": start_headers,
            }
        )
        await send({"type": "websocket.http.response.body", "body": payload})
        return
    await send({"type": "http.response.start", "status": status, "headers": start_headers})
    await send({"type": "http.response.body", "body": payload})
