"""WebSockets to a port inside a sandbox: the client's upgrade, relayed through the guest tunnel.

The ASGI server (uvicorn, with the ``websockets`` package) speaks WebSocket to the client;
``websockets``' sans-I/O ``ClientProtocol`` speaks it to the service inside the sandbox over a
fresh tunnel (``guest.tunnel(port)``). Between the two, whole messages are relayed: text stays
text, binary stays binary, fragments are joined, close codes and reasons pass both ways.
Control frames are answered per hop, as by any WebSocket proxy: the ASGI server answers the
client's pings, the relay answers the service's. No frame is parsed here by hand.

The handshake is the service's to decide: its subprotocol choice and response headers go back
in the accept; a refusal (any status other than 101) goes back as that status and body; a
service that never answers within ``HANDSHAKE_TIMEOUT_S`` gets the client a 504. Messages are
capped at ``MAX_MESSAGE_BYTES`` in both directions (close code 1009 beyond it).

SECURITY: the caller is already authorised by the router (the traffic-token rule, as for
HTTP). The routing headers, both tokens, ``Sec-WebSocket-*`` and hop-by-hop headers are not
forwarded, so code inside never sees the sandbox's credentials. ``Origin`` and cookies are
forwarded: they are the service's own business (the proxy itself trusts no cookie).
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import Final

from starlette.types import Receive, Scope, Send
from websockets.client import ClientProtocol
from websockets.datastructures import Headers
from websockets.exceptions import InvalidHandshake, InvalidStatus
from websockets.frames import Close, CloseCode, Frame, Opcode
from websockets.http11 import Request, Response
from websockets.protocol import State
from websockets.typing import Subprotocol
from websockets.uri import parse_uri

from sandgate._tasks import cancel_and_wait
from sandgate.api.replies import send_json

__all__ = ["HANDSHAKE_TIMEOUT_S", "MAX_MESSAGE_BYTES", "relay_websocket"]

#: Largest message relayed either way; uvicorn's ``ws_max_size`` is set to the same.
MAX_MESSAGE_BYTES: Final = 16 * 1024 * 1024
HANDSHAKE_TIMEOUT_S: Final = 30.0
#: After a close is passed on, how long the other side gets to finish its closing handshake.
_CLOSE_TIMEOUT_S: Final = 10.0
_READ: Final = 256 * 1024
_NOT_FORWARDED: Final = frozenset(
    {
        "connection",
        "keep-alive",
        "proxy-connection",
        "te",
        "trailer",
        "transfer-encoding",
        "upgrade",
        "content-length",
        "e2b-sandbox-id",
        "e2b-sandbox-port",
        "x-access-token",
        "e2b-traffic-access-token",
    }
)
#: Close codes that must not be sent in a close frame; what the other side gets instead.
_UNSENDABLE: Final[dict[int, int]] = {
    CloseCode.NO_STATUS_RCVD: CloseCode.NORMAL_CLOSURE,
    CloseCode.ABNORMAL_CLOSURE: CloseCode.INTERNAL_ERROR,
    CloseCode.TLS_HANDSHAKE: CloseCode.INTERNAL_ERROR,
}


async def relay_websocket(
    scope: Scope,
    receive: Receive,
    send: Send,
    reader: asyncio.StreamReader,
    writer: asyncio.StreamWriter,
) -> None:
    """Relays one WebSocket between the ASGI client and the tunnel (already open to the
    port); returns when both sides are closed. The caller closes ``writer``."""
    if (await receive())["type"] != "websocket.connect":
        return
    protocol = ClientProtocol(
        parse_uri("ws://sandbox" + _target(scope)),
        subprotocols=[Subprotocol(p) for p in scope.get("subprotocols", [])] or None,
        max_size=MAX_MESSAGE_BYTES,
    )
    protocol.send_request(_handshake(scope, protocol.connect()))
    relay = _Relay(protocol, send, reader, writer)
    relay.flush()
    try:
        async with asyncio.timeout(HANDSHAKE_TIMEOUT_S):
            response = await relay.handshake()
    except TimeoutError:
        message = (
            "the sandbox service did not answer the WebSocket upgrade within "
            f"{HANDSHAKE_TIMEOUT_S:.0f} s"
        )
        await send_json(scope, send, 504, {"code": 504, "message": message})
        return
    if response is None or protocol.handshake_exc is not None:
        await _refused(scope, send, response, protocol.handshake_exc)
        return
    await send(
        {
            "type": "websocket.accept",
            "subprotocol": protocol.subprotocol,
            "headers": _response_headers(response, accept=True),
        }
    )
    upstream = asyncio.create_task(relay.from_client(receive))
    try:
        await relay.from_service()
    finally:
        if not upstream.done():
            # The service's side is closed and the client told: stop reading the client.
            upstream.cancel()
        await cancel_and_wait(upstream, absorb=())


def _target(scope: Scope) -> str:
    raw = scope.get("raw_path") or scope["path"].encode()
    target: str = raw.decode("latin-1")
    if scope.get("query_string"):
        target += "?" + scope["query_string"].decode("latin-1")
    return target


def _handshake(scope: Scope, request: Request) -> Request:
    """The service's upgrade request: the client's own headers (the ``Host`` it named
    included), minus credentials and per-hop ones, plus this hop's key and version."""
    headers = Headers()
    for raw_name, raw_value in scope["headers"]:
        name = raw_name.decode("latin-1")
        lower = name.lower()
        if lower in _NOT_FORWARDED or lower.startswith("sec-websocket-"):
            continue
        headers[name] = raw_value.decode("latin-1")
    for name in ("Upgrade", "Connection", "Sec-WebSocket-Key", "Sec-WebSocket-Version"):
        headers[name] = request.headers[name]
    if "Sec-WebSocket-Protocol" in request.headers:
        headers["Sec-WebSocket-Protocol"] = request.headers["Sec-WebSocket-Protocol"]
    if "Host" not in headers:
        headers["Host"] = "localhost"
    return Request(request.path, headers)


def _response_headers(response: Response, *, accept: bool) -> list[tuple[bytes, bytes]]:
    return [
        (name.lower().encode("latin-1"), value.encode("latin-1"))
        for name, value in response.headers.raw_items()
        if name.lower() not in _NOT_FORWARDED
        and not (accept and name.lower().startswith("sec-websocket-"))
    ]


async def _refused(
    scope: Scope, send: Send, response: Response | None, error: Exception | None
) -> None:
    """The service said no (its status and body go back) or spoke no WebSocket (502)."""
    said_no = isinstance(error, InvalidStatus) and response is not None
    if (
        said_no
        and response is not None
        and "websocket.http.response" in scope.get("extensions", {})
    ):
        await send(
            {
                "type": "websocket.http.response.start",
                "status": response.status_code,
                "headers": _response_headers(response, accept=False),
            }
        )
        await send({"type": "websocket.http.response.body", "body": bytes(response.body or b"")})
        return
    if said_no and response is not None:
        why = f"refused the WebSocket upgrade with {response.status_code}"
    elif isinstance(error, InvalidHandshake):
        why = f"answered the WebSocket upgrade wrongly ({error})"
    else:
        why = "closed the connection instead of answering the WebSocket upgrade"
    await send_json(scope, send, 502, {"code": 502, "message": f"the sandbox service {why}"})


class _Relay:
    """One relayed WebSocket: the service's protocol state and both directions' pumps."""

    def __init__(
        self,
        protocol: ClientProtocol,
        send: Send,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
    ) -> None:
        self._protocol = protocol
        self._send = send
        self._reader = reader
        self._writer = writer
        #: Frames that arrived with the handshake response, before the pump started.
        self._early: list[Frame] = []
        self._client_gone = False
        self._parts: list[bytes] = []
        self._opcode = Opcode.TEXT

    async def handshake(self) -> Response | None:
        """The service's handshake response, or None if it closed without one."""
        protocol = self._protocol
        while True:
            response: Response | None = None
            for event in protocol.events_received():
                if isinstance(event, Response):
                    response = event
                elif response is not None and isinstance(event, Frame):
                    self._early.append(event)
            if response is not None:
                return response
            if protocol.handshake_exc is not None:
                return None
            data = await self._reader.read(_READ)
            if data:
                protocol.receive_data(data)
            else:
                protocol.receive_eof()
                if protocol.handshake_exc is None and protocol.state is not State.OPEN:
                    events = protocol.events_received()
                    found = [e for e in events if isinstance(e, Response)]
                    return found[0] if found else None
            self.flush()

    async def from_client(self, receive: Receive) -> None:
        """Client → service until the client closes; then its close goes on."""
        protocol = self._protocol
        while True:
            message = await receive()
            if message["type"] == "websocket.receive":
                if protocol.state is not State.OPEN:
                    continue
                if message.get("text") is not None:
                    protocol.send_text(message["text"].encode())
                else:
                    protocol.send_binary(message.get("bytes") or b"")
                self.flush()
                await self._writer.drain()
            elif message["type"] == "websocket.disconnect":
                self._client_gone = True
                if protocol.state is State.OPEN:
                    code = int(message.get("code") or CloseCode.NORMAL_CLOSURE)
                    protocol.send_close(_UNSENDABLE.get(code, code), message.get("reason") or "")
                    self.flush()
                    with contextlib.suppress(ConnectionError):
                        await self._writer.drain()
                return

    async def from_service(self) -> None:
        """Service → client until the service's side is closed; its close code goes to the
        client (1011 if it vanished without one)."""
        protocol = self._protocol
        for frame in self._early:
            await self._deliver(frame)
        self._early = []
        while protocol.state is not State.CLOSED:
            try:
                timeout = _CLOSE_TIMEOUT_S if protocol.state is State.CLOSING else None
                async with asyncio.timeout(timeout):
                    data = await self._reader.read(_READ)
            except (TimeoutError, ConnectionError):
                data = b""
            if data:
                protocol.receive_data(data)
            else:
                protocol.receive_eof()
            for event in protocol.events_received():
                if isinstance(event, Frame):
                    await self._deliver(event)
            self.flush()
            if not data:
                break
        if not self._client_gone:
            await self._send(self._close_for_client())

    async def _deliver(self, frame: Frame) -> None:
        if frame.opcode not in (Opcode.TEXT, Opcode.BINARY, Opcode.CONT):
            return  # control frames: answered by the protocol itself
        if frame.opcode is not Opcode.CONT:
            self._opcode, self._parts = frame.opcode, []
        self._parts.append(bytes(frame.data))
        if not frame.fin or self._client_gone:
            return
        payload, self._parts = b"".join(self._parts), []
        if self._opcode is Opcode.BINARY:
            await self._send({"type": "websocket.send", "bytes": payload})
            return
        try:
            text = payload.decode()
        except UnicodeDecodeError:
            self._protocol.fail(CloseCode.INVALID_DATA, "invalid UTF-8 in a text message")
            self.flush()
            return
        await self._send({"type": "websocket.send", "text": text})

    def _close_for_client(self) -> dict[str, object]:
        received: Close | None = self._protocol.close_rcvd
        sent: Close | None = self._protocol.close_sent
        if received is not None:
            code = _UNSENDABLE.get(received.code, received.code)
            return {"type": "websocket.close", "code": code, "reason": received.reason}
        if sent is not None and sent.code == CloseCode.MESSAGE_TOO_BIG:
            reason = f"the sandbox service sent a message over {MAX_MESSAGE_BYTES} bytes"
            return {"type": "websocket.close", "code": sent.code, "reason": reason}
        if sent is not None:
            # The relay closed the service's side for a protocol error the service made.
            return {"type": "websocket.close", "code": sent.code, "reason": sent.reason[:120]}
        return {
            "type": "websocket.close",
            "code": CloseCode.INTERNAL_ERROR,
            "reason": "the sandbox service closed the connection without a close frame",
        }

    def flush(self) -> None:
        """Writes what the protocol has queued for the service (b"" means half-close)."""
        for chunk in self._protocol.data_to_send():
            if chunk:
                self._writer.write(chunk)
            elif self._writer.can_write_eof():
                with contextlib.suppress(OSError):
                    self._writer.write_eof()
