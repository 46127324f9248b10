"""One HTTPS request through a terminated tunnel: the only place a placeholder becomes a secret.

Used for CONNECTs to a host:port that one of the sandbox's secrets is bound to. The tunnel has
already checked the policy, dialled the checked address and matched the client's SNI to the
CONNECT host. Here:

1. TLS with the sandbox client, presenting a certificate the install's CA minted for the host;
2. TLS with the upstream, verified against the system's roots (plus ``upstream_ca_file``), for
   the CONNECT host, on the connection the tunnel dialled;
3. one request, parsed strictly (NET-10); its ``Host`` must name the CONNECT host, else 421
   (NET-08); placeholders are replaced in the bound headers only (never URL, body, cookies),
   the request is audited (fail closed) and sent with ``Connection: close``;
4. the response is streamed back with every bound secret value masked (SEC-04), never
   followed (NET-11, SEC-05), and the tunnel ends. Clients open a new tunnel per request,
   which every HTTP client does on ``Connection: close``.

h11 frames both sides once the head has passed the strict parser; upgrades (WebSocket) are
refused, since a secret must never ride in a frame the proxy cannot read.
"""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Final

import h11

from sandgate.egress.names import InvalidHost, canonical_host
from sandgate.egress.placeholders import SandboxSecrets, Scrubber, SecretUnavailable
from sandgate.egress.refusal import Refused
from sandgate.egress.request import HOP_BY_HOP, MAX_HEAD, BadRequest, check_framing, parse_head

__all__ = ["Exchange", "TlsServerStream", "exchange"]

_CHUNK: Final = 64 * 1024
_HANDSHAKE_TIMEOUT_S: Final = 15.0
#: Hop-by-hop and proxy headers; ``Host`` stays (it was checked), ``Upgrade`` was refused.
_DROP_REQUEST: Final = HOP_BY_HOP - {b"host"}
_DROP_RESPONSE: Final = frozenset({b"connection", b"keep-alive", b"proxy-connection"})


class TlsServerStream:
    """The server end of TLS over a sandbox's tunnel, driven through memory BIOs so the
    handshake can start from bytes the tunnel already read (the ClientHello it inspected)."""

    def __init__(
        self,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        context: ssl.SSLContext,
    ) -> None:
        self._reader = reader
        self._writer = writer
        self._incoming = ssl.MemoryBIO()
        self._outgoing = ssl.MemoryBIO()
        self._tls = context.wrap_bio(self._incoming, self._outgoing, server_side=True)

    async def handshake(self, first_flight: bytes) -> None:
        """Raises ``ssl.SSLError``, ``ConnectionError`` or ``TimeoutError``."""
        self._incoming.write(first_flight)
        async with asyncio.timeout(_HANDSHAKE_TIMEOUT_S):
            while True:
                try:
                    self._tls.do_handshake()
                    break
                except ssl.SSLWantReadError:
                    await self._flush()
                    await self._fill()
        await self._flush()

    async def read(self) -> bytes:
        """Up to one chunk of plaintext; b"" at the end of the stream."""
        while True:
            try:
                return self._tls.read(_CHUNK)
            except ssl.SSLWantReadError:
                await self._flush()  # TLS 1.3 session tickets go out on the first read
                if not await self._fill():
                    return b""
            except (ssl.SSLZeroReturnError, ssl.SSLEOFError):
                return b""

    async def write(self, data: bytes) -> None:
        if data:
            self._tls.write(data)
        await self._flush()

    async def _fill(self) -> bool:
        data = await self._reader.read(_CHUNK)
        if not data:
            self._incoming.write_eof()
            return False
        self._incoming.write(data)
        return True

    async def _flush(self) -> None:
        data = self._outgoing.read()
        if data:
            self._writer.write(data)
            await self._writer.drain()


@dataclass
class Exchange:
    """What happened, for the tunnel's audit record."""

    method: str | None = None
    path: str | None = None
    status: int | None = None
    secrets: list[str] = field(default_factory=list)
    bytes_up: int = 0
    bytes_down: int = 0


async def exchange(
    client: TlsServerStream,
    up_reader: asyncio.StreamReader,
    up_writer: asyncio.StreamWriter,
    *,
    host: str,
    port: int,
    secrets: SandboxSecrets,
    audit_request: Callable[[Exchange], None],
    idle_timeout_s: float,
    result: Exchange,
) -> None:
    """Runs the request/response described in the module docstring over an upstream
    connection already wrapped in verified TLS. Raises ``Refused`` for an answer the client
    should get instead (the caller writes it through ``client``)."""
    inbound = h11.Connection(h11.SERVER)
    buffered = await _read_head(client, idle_timeout_s)
    head = _checked_head(buffered, host, port)
    inbound.receive_data(buffered)
    request = inbound.next_event()
    if not isinstance(request, h11.Request):  # pragma: no cover - the strict parser agreed
        raise Refused(400, "bad_request", "bad_request", "malformed request")
    headers = [(n, v) for n, v in request.headers.raw_items() if n.lower() not in _DROP_REQUEST]
    try:
        headers, used = secrets.substitute(headers, host, port)
    except SecretUnavailable as exc:
        raise Refused(502, "secret_unavailable", "secret_unavailable", str(exc)) from None
    headers.append((b"Connection", b"close"))
    result.method, result.secrets = head.method, used
    result.path = head.target.split("?", 1)[0][:512]
    audit_request(result)  # raises Refused when the record cannot be written

    outbound = h11.Connection(h11.CLIENT)
    try:
        forwarded = h11.Request(method=request.method, target=request.target, headers=headers)
        up_writer.write(outbound.send(forwarded) or b"")
    except h11.LocalProtocolError as exc:
        raise Refused(400, "bad_request", "bad_request", str(exc)) from None
    scrubber = secrets.scrubber()
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


async def _read_head(client: TlsServerStream, idle_timeout_s: float) -> bytes:
    buffered = b""
    while b"\r\n\r\n" not in buffered:
        if len(buffered) > MAX_HEAD:
            raise Refused(400, "bad_request", "bad_request", "request head too large")
        data = await asyncio.wait_for(client.read(), idle_timeout_s)
        if not data:
            raise ConnectionError("client closed before a request")
        buffered += data
    return buffered


def _checked_head(buffered: bytes, host: str, port: int) -> Any:
    try:
        head = parse_head(buffered[: buffered.index(b"\r\n\r\n") + 4])
        check_framing(head)
    except BadRequest as exc:
        raise Refused(400, "bad_request", "bad_request", str(exc)) from None
    if head.method == "CONNECT" or not head.target.startswith("/"):
        raise Refused(400, "bad_request", "bad_request", "inside the tunnel, send origin-form")
    if head.values(b"upgrade"):
        raise Refused(
            501,
            "not_supported",
            "upgrade",
            "protocol upgrades (WebSocket) are not carried to hosts a secret is bound to",
        )
    hosts = head.values(b"host")
    if len(hosts) != 1 or not _names(hosts[0], host, port):
        raise Refused(
            421,
            "destination_denied",
            "host_mismatch",
            f"this tunnel is for {host}:{port}; the Host header must name it",
        )
    return head


def _names(value: bytes, host: str, port: int) -> bool:
    text = value.decode("ascii", "replace")
    name, sep, port_text = text.rpartition(":") if not text.endswith("]") else (text, "", "")
    if not sep:
        name, port_text = text, ""
    if port_text and port_text != str(port):
        return False
    try:
        return canonical_host(name) == host
    except InvalidHost:
        return False


async def _upward(
    client: TlsServerStream,
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
            data = await asyncio.wait_for(client.read(), idle_timeout_s)
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
    client: TlsServerStream,
    inbound: h11.Connection,
    outbound: h11.Connection,
    up_reader: asyncio.StreamReader,
    scrubber: Scrubber,
    idle_timeout_s: float,
    result: Exchange,
) -> None:
    """Response: upstream → sandbox, scrubbed, ending the exchange."""
    while True:
        try:
            event = outbound.next_event()
        except h11.RemoteProtocolError as exc:
            raise Refused(502, "upstream_unavailable", "bad_response", str(exc)) from None
        if event is h11.NEED_DATA:
            data = await asyncio.wait_for(up_reader.read(_CHUNK), idle_timeout_s)
            outbound.receive_data(data)
            continue
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
