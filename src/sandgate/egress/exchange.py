"""One HTTP request the proxy can read, forwarded upstream, and its response.

Every request whose head the proxy sees takes this path: an absolute-form ``http://``
request, plain HTTP inside a CONNECT tunnel, and HTTPS inside a tunnel the proxy terminates
(``intercept``). Before anything reaches this module the caller has dialled the checked
address and checked the head (``checked_head``): strict syntax and framing (NET-10), the
target form, and a ``Host`` naming the authority the policy allowed (``authority``; NET-08).
Here:

1. headers: hop-by-hop, ``Proxy-*`` and whatever ``Connection`` names are dropped; ``Host``
   is sent in canonical form (the same authority, checked); placeholders are replaced in
   the bound headers of a terminated tunnel only (never URL, body, cookies); ``Connection:
   close`` is added, so one proxy connection carries one request;
2. the request is audited (fail closed), then sent, its body re-framed by h11, and anything
   after it (a pipelined second request) is never forwarded;
3. the response is streamed back, scrubbed of bound secret values (SEC-04), never followed
   (NET-11, SEC-05), and the connection ends.

Upgrades: refused (501) where a secret could ride in a frame the proxy cannot read; elsewhere
an upstream ``101`` switches both sides to plain byte copying (the caller splices), so
WebSocket over plain HTTP keeps working after its ``Host`` was checked.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Final, Protocol

import h11

from sandgate.egress.authority import Authority, check_host_header
from sandgate.egress.placeholders import SandboxSecrets, Scrubber, SecretUnavailable
from sandgate.egress.refusal import Refused
from sandgate.egress.request import (
    HOP_BY_HOP,
    MAX_HEAD,
    BadRequest,
    Head,
    check_framing,
    parse_head,
)

__all__ = ["ClientStream", "Exchange", "PlainStream", "checked_head", "exchange", "read_head"]

_CHUNK: Final = 64 * 1024
_DROP_RESPONSE: Final = frozenset({b"connection", b"keep-alive", b"proxy-connection"})


class ClientStream(Protocol):
    """The sandbox's side of one exchange, in plaintext."""

    async def read(self) -> bytes:
        """Up to one chunk; b"" at the end of the stream."""
        ...

    async def write(self, data: bytes) -> None: ...


class PlainStream:
    """A sandbox connection the proxy reads in the clear."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._reader = reader
        self._writer = writer

    async def read(self) -> bytes:
        return await self._reader.read(_CHUNK)

    async def write(self, data: bytes) -> None:
        if data:
            self._writer.write(data)
            await self._writer.drain()


@dataclass
class Exchange:
    """What happened, for the tunnel's audit records. ``switched``: the upstream accepted
    an upgrade; ``client_rest``/``upstream_rest`` are bytes each side sent past the
    handshake, still to be delivered to the other."""

    method: str | None = None
    path: str | None = None
    status: int | None = None
    secrets: list[str] = field(default_factory=list)
    bytes_up: int = 0
    bytes_down: int = 0
    switched: bool = False
    client_rest: bytes = b""
    upstream_rest: bytes = b""


async def read_head(client: ClientStream, idle_timeout_s: float) -> bytes:
    """Reads until a whole request head is buffered; raises ``BadRequest`` (too large) and
    ``ConnectionError`` (the client left first)."""
    buffered = b""
    while b"\r\n\r\n" not in buffered:
        if len(buffered) > MAX_HEAD:
            raise BadRequest("request head too large")
        async with asyncio.timeout(idle_timeout_s):
            data = await client.read()
        if not data:
            raise ConnectionError("client closed before a request")
        buffered += data
    return buffered


def checked_head(buffered: bytes, authority: Authority, *, default_port: int) -> Head:
    """The head of a request inside a tunnel to ``authority``: strict syntax and framing,
    origin-form, and a ``Host`` that names the tunnel's authority. Raises ``BadRequest``."""
    end = buffered.find(b"\r\n\r\n")
    if end < 0:
        raise BadRequest("request head too large or incomplete")
    head = parse_head(buffered[: end + 4])
    check_framing(head)
    if head.method == "CONNECT" or not head.target.startswith("/"):
        raise BadRequest(
            "inside a tunnel, send origin-form ('GET /path'); the tunnel already names the host",
            "target_form",
        )
    check_host_header(head, authority, default_port=default_port, required=True)
    return head


#: Never dropped because ``Connection`` names them: h11 frames the body by them.
_FRAMING: Final = frozenset({b"content-length", b"transfer-encoding"})


def _connection_tokens(head: Head) -> frozenset[bytes]:
    named = {t.strip().lower() for v in head.values(b"connection") for t in v.split(b",")}
    return frozenset(named - _FRAMING)


async def exchange(
    client: ClientStream,
    buffered: bytes,
    head: Head,
    up_reader: asyncio.StreamReader,
    up_writer: asyncio.StreamWriter,
    *,
    authority: Authority,
    default_port: int,
    target: str,
    secrets: SandboxSecrets | None,
    audit_request: Callable[[Exchange], Awaitable[None]],
    idle_timeout_s: float,
    result: Exchange,
) -> None:
    """Runs the request/response described in the module docstring. ``buffered`` starts
    with ``head`` (already checked); ``target`` is the origin-form target to send;
    ``secrets`` are given for a terminated tunnel only. Raises ``Refused`` for an answer the
    client should get instead (the caller writes it, if ``result.status`` is still None)."""
    inbound = h11.Connection(h11.SERVER)
    inbound.receive_data(buffered)
    try:
        request = inbound.next_event()
    except h11.RemoteProtocolError as exc:
        raise Refused(400, "bad_request", "bad_request", str(exc)) from None
    if not isinstance(request, h11.Request):  # pragma: no cover - the strict parser agreed
        raise Refused(400, "bad_request", "bad_request", "malformed request")
    upgrade = head.values(b"upgrade")
    if upgrade and secrets is not None:
        raise Refused(
            501,
            "not_supported",
            "upgrade",
            "protocol upgrades (WebSocket) are not carried to hosts a secret is bound to",
        )
    dropped = HOP_BY_HOP | _connection_tokens(head)
    headers = [(b"Host", authority.host_header(default_port))]
    headers += [(n, v) for n, v in request.headers.raw_items() if n.lower() not in dropped]
    used: list[str] = []
    if secrets is not None:
        try:
            headers, used = secrets.substitute(headers, authority.host, authority.port)
        except SecretUnavailable as exc:
            raise Refused(502, "secret_unavailable", "secret_unavailable", str(exc)) from None
    if upgrade:
        headers += [(b"Upgrade", b", ".join(upgrade)), (b"Connection", b"Upgrade")]
    else:
        headers.append((b"Connection", b"close"))
    result.method, result.secrets = head.method, used
    result.path = target.split("?", 1)[0][:512]
    await audit_request(result)  # raises Refused when the record cannot be written

    outbound = h11.Connection(h11.CLIENT)
    try:
        forwarded = h11.Request(method=request.method, target=target, headers=headers)
        up_writer.write(outbound.send(forwarded) or b"")
    except h11.LocalProtocolError as exc:
        # SECURITY: h11 quotes the offending header; after substitution that may be a secret,
        # and this answer goes back into the sandbox.
        detail = str(exc) if not used else f"a header is not valid HTTP once {used} is set"
        raise Refused(400, "bad_request", "bad_request", detail) from None
    scrubber = secrets.scrubber() if secrets is not None else Scrubber(())
    upward = asyncio.ensure_future(
        _upward(client, inbound, outbound, up_writer, idle_timeout_s, result)
    )
    downward = asyncio.ensure_future(
        _downward(client, inbound, outbound, up_reader, scrubber, idle_timeout_s, result)
    )
    try:
        done, _ = await asyncio.wait({upward, downward}, return_when=asyncio.FIRST_COMPLETED)
        failure = upward.exception() if upward in done else None
        if failure is not None and downward not in done:
            # The request body broke off or was malformed: the upstream would wait forever.
            if isinstance(failure, h11.ProtocolError):
                raise Refused(400, "bad_request", "bad_request", str(failure)) from None
            raise failure
        await downward
    finally:
        for task in (upward, downward):
            task.cancel()
        await asyncio.gather(upward, downward, return_exceptions=True)
    if result.switched:
        result.client_rest = inbound.trailing_data[0]
        result.upstream_rest = outbound.trailing_data[0]


async def _upward(
    client: ClientStream,
    inbound: h11.Connection,
    outbound: h11.Connection,
    up_writer: asyncio.StreamWriter,
    idle_timeout_s: float,
    result: Exchange,
) -> None:
    """Request body: sandbox → upstream, re-framed by h11."""
    while True:
        event = inbound.next_event()
        if event is h11.NEED_DATA:
            async with asyncio.timeout(idle_timeout_s):
                data = await client.read()
            inbound.receive_data(data)
            continue
        if isinstance(event, h11.Data):
            result.bytes_up += len(event.data)
            up_writer.write(outbound.send(event) or b"")
            await up_writer.drain()
        elif isinstance(event, h11.EndOfMessage):
            up_writer.write(outbound.send(h11.EndOfMessage()) or b"")
            await up_writer.drain()
            return
        else:
            return


async def _downward(
    client: ClientStream,
    inbound: h11.Connection,
    outbound: h11.Connection,
    up_reader: asyncio.StreamReader,
    scrubber: Scrubber,
    idle_timeout_s: float,
    result: Exchange,
) -> None:
    """Response: upstream → sandbox, scrubbed, ending the exchange (or switching it)."""
    while True:
        try:
            event = outbound.next_event()
        except h11.RemoteProtocolError as exc:
            raise Refused(502, "upstream_unavailable", "bad_response", str(exc)) from None
        if event is h11.NEED_DATA:
            async with asyncio.timeout(idle_timeout_s):
                data = await up_reader.read(_CHUNK)
            outbound.receive_data(data)
            continue
        if isinstance(event, h11.InformationalResponse) and event.status_code == 101:
            # Only reachable when the client asked for the upgrade (h11 refuses otherwise).
            switch = h11.InformationalResponse(
                status_code=101, headers=event.headers.raw_items(), reason=event.reason
            )
            await client.write(inbound.send(switch) or b"")
            result.status, result.switched = 101, True
            return
        if isinstance(event, h11.InformationalResponse | h11.Response):
            headers = [
                (n, scrubber.scrub(v))
                for n, v in event.headers.raw_items()
                if n.lower() not in _DROP_RESPONSE
            ]
            if isinstance(event, h11.Response):
                result.status = event.status_code
                headers.append((b"Connection", b"close"))
                reply: h11.Event = h11.Response(
                    status_code=event.status_code, headers=headers, reason=event.reason
                )
            else:
                reply = h11.InformationalResponse(
                    status_code=event.status_code, headers=headers, reason=event.reason
                )
            await client.write(inbound.send(reply) or b"")
        elif isinstance(event, h11.Data):
            result.bytes_down += len(event.data)
            await client.write(inbound.send(h11.Data(data=scrubber.feed(bytes(event.data)))) or b"")
        elif isinstance(event, h11.EndOfMessage):
            tail = scrubber.flush()
            if tail:
                await client.write(inbound.send(h11.Data(data=tail)) or b"")
            await client.write(inbound.send(h11.EndOfMessage()) or b"")
            return
        else:
            raise Refused(502, "upstream_unavailable", "bad_response", "upstream closed early")
