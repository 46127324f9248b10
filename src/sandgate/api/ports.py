"""HTTP and WebSockets to a port inside a sandbox (``Host: <port>-<id>.<domain>`` or the
routing headers).

Sandboxes have no network interface of their own: each request is carried over a fresh tunnel
through the guest socket to ``127.0.0.1:<port>`` inside the sandbox, as HTTP/1.1 with
``Connection: close``, and the response is streamed back as it arrives. h11 does the HTTP
framing on the sandbox side of the tunnel. A WebSocket upgrade gets a tunnel of its own too,
relayed message by message (``ws_relay``). A closed port answers E2B's 502 JSON.

SECURITY: the routing headers, the access token and hop-by-hop headers are stripped before the
request enters the sandbox, so code inside never sees the sandbox's own credentials.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Final

import h11
from starlette.types import Message, Receive, Scope, Send

from sandgate.api.replies import send_json
from sandgate.api.ws_relay import relay_websocket
from sandgate.guest.client import GuestError

__all__ = ["PortProxy"]

_DROP: Final = frozenset(
    {
        b"connection",
        b"keep-alive",
        b"proxy-connection",
        b"te",
        b"trailer",
        b"transfer-encoding",
        b"upgrade",
        b"e2b-sandbox-id",
        b"e2b-sandbox-port",
        b"x-access-token",
        b"e2b-traffic-access-token",
    }
)
_READ: Final = 64 * 1024


class PortProxy:
    """ASGI app: forwards one HTTP request or WebSocket to the sandbox port the router chose."""

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        route = scope["sandgate.route"]
        port: int = scope["sandgate.port"]
        try:
            reader, writer = await route.guest.tunnel(port)
        except GuestError:
            await send_json(
                scope,
                send,
                502,
                {
                    "sandboxId": route.sandbox_id,
                    "message": "The sandbox is running but port is not open",
                    "port": port,
                    "code": 502,
                },
            )
            return
        try:
            if scope["type"] == "websocket":
                await relay_websocket(scope, receive, send, reader, writer)
            else:
                await self._exchange(scope, receive, send, reader, writer)
        finally:
            writer.close()

    async def _exchange(
        self,
        scope: Scope,
        receive: Receive,
        send: Send,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
    ) -> None:
        conn = h11.Connection(h11.CLIENT)
        target = scope["raw_path"] if scope.get("raw_path") else scope["path"].encode()
        if scope.get("query_string"):
            target += b"?" + scope["query_string"]
        original = {k.lower(): v for k, v in scope["headers"]}
        headers = [(k, v) for k, v in scope["headers"] if k.lower() not in _DROP]
        headers.append((b"connection", b"close"))
        if b"chunked" in original.get(b"transfer-encoding", b"").lower():
            # No length known up front: keep streaming it chunked. Otherwise Content-Length
            # (kept above) frames the body, or there is none.
            headers.append((b"transfer-encoding", b"chunked"))
        request = h11.Request(method=scope["method"], target=target, headers=headers)
        writer.write(conn.send(request) or b"")
        upload = asyncio.create_task(self._upload(conn, receive, writer))
        try:
            await self._download(scope, conn, reader, send)
        finally:
            upload.cancel()

    @staticmethod
    async def _upload(conn: h11.Connection, receive: Receive, writer: asyncio.StreamWriter) -> None:
        more = True
        while more:
            message: Message = await receive()
            if message["type"] != "http.request":
                writer.close()
                return
            body = message.get("body", b"")
            if body:
                writer.write(conn.send(h11.Data(data=body)) or b"")
                await writer.drain()
            more = message.get("more_body", False)
        writer.write(conn.send(h11.EndOfMessage()) or b"")
        await writer.drain()
        # A client that disconnects mid-response closes the tunnel, so the service inside
        # sees EOF (the code interpreter interrupts the running cell on it).
        while (await receive())["type"] != "http.disconnect":
            pass
        writer.close()

    @staticmethod
    async def _events(conn: h11.Connection, reader: asyncio.StreamReader) -> AsyncIterator[object]:
        while True:
            event = conn.next_event()
            if event is h11.NEED_DATA:
                conn.receive_data(await reader.read(_READ))
                continue
            yield event
            if isinstance(event, h11.EndOfMessage | h11.ConnectionClosed):
                return

    async def _download(
        self, scope: Scope, conn: h11.Connection, reader: asyncio.StreamReader, send: Send
    ) -> None:
        """Relays the service's response. One that stops early (the sandbox was killed, the
        service crashed) is cut off: the client's connection closes without the end of the
        body, so the SDKs see a broken read and check whether the sandbox still runs (their
        "sandbox was killed" error) instead of taking a partial answer for a whole one."""
        started = complete = False
        try:
            async for event in self._events(conn, reader):
                if isinstance(event, h11.Response):
                    headers = [(k, v) for k, v in event.headers if k.lower() not in _DROP]
                    await send(
                        {
                            "type": "http.response.start",
                            "status": event.status_code,
                            "headers": headers,
                        }
                    )
                    started = True
                elif isinstance(event, h11.Data):
                    await send(
                        {"type": "http.response.body", "body": bytes(event.data), "more_body": True}
                    )
                elif isinstance(event, h11.EndOfMessage):
                    complete = True
        except h11.RemoteProtocolError:
            if not started:
                await send_json(
                    scope,
                    send,
                    502,
                    {"code": 502, "message": "the sandbox service sent an invalid HTTP response"},
                )
                return
        if complete:
            await send({"type": "http.response.body", "body": b"", "more_body": False})
        elif not started:
            await send_json(
                scope,
                send,
                502,
                {"code": 502, "message": "the sandbox service closed the connection"},
            )
        # else: return without ending the body; the ASGI server then closes the connection.
