"""The gateway's end of a sandbox's egress: ``<host_dir>/egress.sock``, one tunnel per
connection.

Trust: everything arriving on the socket comes from code inside one sandbox and is hostile.
The caller is the sandbox the socket belongs to (fixed when the socket is created); nothing in
a request can name another sandbox (NET-18). Enforced here, per connection: request syntax
(``request``), the sandbox's rules (``rules``), host canonicalisation (``names``), resolution
by the gateway (``resolver``), address ranges (``addresses``), a cap on open tunnels, idle and
total time limits, one audit record per decision plus one when an allowed tunnel closes
(with byte counts), and for CONNECT tunnels the TLS server name: a ClientHello whose SNI is not
the CONNECT host ends the tunnel (NET-08). Tunnels to a host:port one of the sandbox's secrets
is bound to are terminated and carry one request each (``intercept``); all others are spliced
byte for byte. The absence of any other route out of the sandbox is the runtime's job (no
network interface but loopback).

Wire: the sandbox side speaks plain HTTP/1.1 proxy requests (the guest's relay on
``127.0.0.1:3128`` just copies bytes to this socket). Refusals are HTTP answers (``refusal``).
"""

from __future__ import annotations

import asyncio
import contextlib
import ssl
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Final

import h11
import structlog

from sandgate.audit import AuditLog
from sandgate.egress.addresses import address_refusal
from sandgate.egress.clienthello import FirstFlight, Malformed, read_first_flight
from sandgate.egress.intercept import Exchange, TlsServerStream, exchange
from sandgate.egress.names import Host, InvalidHost, IPAddress, canonical_host, format_host
from sandgate.egress.placeholders import SandboxSecrets
from sandgate.egress.refusal import Refused
from sandgate.egress.request import MAX_HEAD, BadRequest, ProxyRequest, parse_request
from sandgate.egress.resolver import ResolutionFailed, Resolver
from sandgate.egress.rules import EgressPolicy
from sandgate.egress.tls import EgressCA
from sandgate.errors import AuditUnavailable
from sandgate.sandboxes.listener import SandboxListener

__all__ = ["EgressSocket", "Interception", "TunnelLimits"]

log = structlog.get_logger("sandgate.egress")

_HEAD_TIMEOUT_S: Final = 30.0
_CHUNK: Final = 64 * 1024


@dataclass(frozen=True)
class TunnelLimits:
    max_tunnels: int = 32
    connect_timeout_s: float = 10.0
    idle_timeout_s: float = 300.0
    max_tunnel_s: float = 3600.0


@dataclass(frozen=True)
class Interception:
    """What a socket needs to terminate TLS for bound hosts: the sandbox's secrets, the CA
    that mints certificates for them and the context that verifies the real hosts."""

    secrets: SandboxSecrets
    ca: EgressCA
    upstream: ssl.SSLContext = field(repr=False)


class EgressSocket(SandboxListener):
    """Serves one sandbox's egress socket with that sandbox's policy."""

    read_limit = MAX_HEAD

    def __init__(
        self,
        sandbox_id: str,
        team_id: str,
        policy: EgressPolicy,
        resolver: Resolver,
        audit: AuditLog,
        limits: TunnelLimits,
        interception: Interception | None = None,
    ) -> None:
        self._sandbox = sandbox_id
        self._interception = interception
        self._team = team_id
        self._policy = policy
        self._resolver = resolver
        self._audit = audit
        self._limits = limits
        super().__init__()

    @property
    def open_tunnels(self) -> int:
        return len(self._tasks)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        if task is None:  # pragma: no cover - asyncio always runs handlers in a task
            return
        # SECURITY: counted before reading anything, so idle connections count too (NET-16).
        over = len(self._tasks) >= self._limits.max_tunnels
        self._tasks.add(task)
        try:
            if over:
                with contextlib.suppress(Refused):
                    self._record(None, "denied", "too_many_tunnels")
                raise Refused(
                    429,
                    "too_many_tunnels",
                    "too_many_tunnels",
                    f"this sandbox already has {self._limits.max_tunnels} open tunnels "
                    "(egress.max_tunnels_per_sandbox); close some first",
                )
            await self._tunnel(reader, writer)
        except Refused as refused:
            await self._refuse(writer, refused)
        except (ConnectionError, asyncio.IncompleteReadError, TimeoutError):
            pass
        finally:
            self._tasks.discard(task)
            writer.transport.abort()

    async def _tunnel(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), _HEAD_TIMEOUT_S)
            request = parse_request(head)
        except (asyncio.LimitOverrunError, ValueError) as exc:
            message = str(exc) if isinstance(exc, BadRequest) else "request head too large"
            self._record(None, "denied", "bad_request", detail=message)
            raise Refused(400, "bad_request", "bad_request", message) from None
        address, upstream = await self._open(request)
        up_reader, up_writer = upstream
        host = canonical_host(request.host)
        started = time.monotonic()
        closing: dict[str, Any] = {}
        sent = received = 0
        try:
            if not request.is_connect:
                up_writer.write(request.upstream_head)
                sent, received = await self._splice(reader, writer, up_reader, up_writer)
            else:
                writer.write(b"HTTP/1.1 200 Connection Established\r\n\r\n")
                interception = self._interception
                if interception is not None and interception.secrets.intercepts(host, request.port):
                    sent, received = await self._intercept(
                        reader, writer, up_reader, up_writer, request, interception, closing
                    )
                else:
                    sent, received = await self._splice(
                        reader,
                        writer,
                        up_reader,
                        up_writer,
                        first=lambda: self._first_flight(reader, request, host),
                    )
        except (ConnectionError, asyncio.IncompleteReadError, TimeoutError, ssl.SSLError) as exc:
            closing["ended"] = str(exc)[:200] or type(exc).__name__
        finally:
            up_writer.transport.abort()
        self._record(
            request,
            "closed",
            "closed",
            address=address,
            bytes_up=sent,
            bytes_down=received,
            duration_ms=int((time.monotonic() - started) * 1000),
            event="egress.close",
            **closing,
        )

    async def _first_flight(
        self, reader: asyncio.StreamReader, request: ProxyRequest, host: Host
    ) -> bytes:
        """The client's first bytes, after checking a TLS server name against the CONNECT
        host (NET-08); raises ``ConnectionError`` to end the tunnel."""
        flight = await self._checked_flight(reader, request, host)
        return flight.raw

    async def _checked_flight(
        self, reader: asyncio.StreamReader, request: ProxyRequest, host: Host
    ) -> FirstFlight:
        try:
            flight = await asyncio.wait_for(read_first_flight(reader), _HEAD_TIMEOUT_S)
        except Malformed as exc:
            self._record(request, "denied", "bad_client_hello", detail=str(exc))
            raise ConnectionError("bad ClientHello") from None
        if flight.is_tls and isinstance(host, str):
            try:
                sni = canonical_host(flight.sni) if flight.sni is not None else None
            except InvalidHost:
                sni = None
            if sni != host:
                # SECURITY: the far end would route by this name, not the one we checked.
                self._record(request, "denied", "sni_mismatch", sni=flight.sni)
                raise ConnectionError("SNI mismatch")
        return flight

    async def _intercept(
        self,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        up_reader: asyncio.StreamReader,
        up_writer: asyncio.StreamWriter,
        request: ProxyRequest,
        interception: Interception,
        closing: dict[str, Any],
    ) -> tuple[int, int]:
        host = str(canonical_host(request.host))
        flight = await self._checked_flight(reader, request, host)
        if not flight.is_tls:
            self._record(request, "denied", "tls_required")
            raise ConnectionError("a bound host is reached over TLS only")
        client = TlsServerStream(reader, writer, interception.ca.server_context(host))
        try:
            await client.handshake(flight.raw)
        except (ssl.SSLError, TimeoutError) as exc:
            self._record(request, "denied", "client_tls_failed", detail=str(exc)[:200])
            raise ConnectionError("client TLS failed") from None
        result = Exchange()
        try:
            try:
                async with asyncio.timeout(self._limits.connect_timeout_s):
                    await up_writer.start_tls(interception.upstream, server_hostname=host)
            except (ssl.SSLError, TimeoutError) as exc:
                self._record(request, "denied", "upstream_tls_failed", detail=str(exc)[:200])
                raise Refused(
                    502,
                    "upstream_unavailable",
                    "upstream_tls_failed",
                    f"{host} did not present a certificate the gateway trusts: {exc}",
                ) from None

            def audit_request(done: Exchange) -> None:
                self._record(
                    request,
                    "allowed",
                    "secret_substituted" if done.secrets else "intercepted",
                    event="egress.request",
                    http_method=done.method,
                    path=done.path,
                    secrets=done.secrets,
                )

            await exchange(
                client,
                up_reader,
                up_writer,
                host=host,
                port=request.port,
                secrets=interception.secrets,
                audit_request=audit_request,
                idle_timeout_s=self._limits.idle_timeout_s,
                result=result,
            )
        except h11.ProtocolError as exc:
            closing["ended"] = str(exc)[:200]
        except Refused as refused:
            if result.status is None:  # nothing of a response was sent yet
                with contextlib.suppress(ConnectionError, ssl.SSLError):
                    await client.write(refused.answer())
            closing["refused"] = refused.reason
        closing["status"] = result.status
        return result.bytes_up, result.bytes_down

    async def _open(
        self, request: ProxyRequest
    ) -> tuple[IPAddress, tuple[asyncio.StreamReader, asyncio.StreamWriter]]:
        """Decides, resolves, checks and connects; raises ``Refused``."""
        try:
            host = canonical_host(request.host)
        except InvalidHost as exc:
            self._record(request, "denied", "invalid_host", detail=str(exc))
            raise Refused(403, "destination_denied", "invalid_host", str(exc)) from None
        decision = self._policy.decide(host, request.port)
        target = f"{format_host(host)}:{request.port}"
        if not decision.allowed:
            self._record(request, "denied", decision.reason, rule=decision.rule)
            raise Refused(
                403,
                "destination_denied",
                decision.reason,
                f"{target} is not allowed ({decision.reason}); egress is allow-listed per "
                "sandbox: ask the operator to add it (egress.* in the config)",
            )
        try:
            addresses = await self._resolver.resolve(host, request.port)
        except ResolutionFailed as exc:
            self._record(request, "denied", "resolution_failed", rule=decision.rule)
            raise Refused(502, "upstream_unavailable", "resolution_failed", str(exc)) from None
        # SECURITY: every answer is checked, not just the one we dial, and the dial below
        # uses these exact addresses: no second lookup for rebinding to exploit (NET-05).
        for address in addresses:
            refusal = address_refusal(address, decision.networks)
            if refusal is not None:
                self._record(request, "denied", refusal, rule=decision.rule, address=address)
                raise Refused(
                    403,
                    "destination_denied",
                    refusal,
                    f"{target} resolves to {address}, which sandboxes may not reach ({refusal})",
                )
        last_error = "no address"
        for address in addresses:
            try:
                upstream = await asyncio.wait_for(
                    asyncio.open_connection(str(address), request.port),
                    self._limits.connect_timeout_s,
                )
            except (OSError, TimeoutError) as exc:
                last_error = f"{address}: {exc or 'timed out'}"
                continue
            try:
                self._record(request, "allowed", "allowed", rule=decision.rule, address=address)
            except Refused:
                upstream[1].transport.abort()
                raise
            return address, upstream
        self._record(request, "denied", "connect_failed", rule=decision.rule)
        message = f"cannot connect to {target}: {last_error}"
        raise Refused(502, "upstream_unavailable", "connect_failed", message)

    async def _splice(
        self,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        up_reader: asyncio.StreamReader,
        up_writer: asyncio.StreamWriter,
        first: Callable[[], Awaitable[bytes]] | None = None,
    ) -> tuple[int, int]:
        """Copies both ways until the upstream is done; ``first`` supplies (and may inspect)
        the client's first bytes before anything of theirs goes upstream."""
        counts = [0, 0]
        idle = self._limits.idle_timeout_s

        async def pump(src: asyncio.StreamReader, dst: asyncio.StreamWriter, slot: int) -> None:
            if slot == 0 and first is not None:
                data = await first()
                counts[0] += len(data)
                dst.write(data)
                await dst.drain()
            while data := await asyncio.wait_for(src.read(_CHUNK), idle):
                counts[slot] += len(data)
                dst.write(data)
                await dst.drain()
            if dst.can_write_eof():
                dst.write_eof()

        downstream = asyncio.ensure_future(pump(up_reader, writer, 1))
        pumps = {asyncio.ensure_future(pump(reader, up_writer, 0)), downstream}
        deadline = asyncio.get_running_loop().time() + self._limits.max_tunnel_s
        try:
            pending = pumps
            while pending:
                timeout = deadline - asyncio.get_running_loop().time()
                if timeout <= 0:
                    break
                done, pending = await asyncio.wait(
                    pending, timeout=timeout, return_when=asyncio.FIRST_COMPLETED
                )
                # Once the upstream has finished sending, nothing more can come back: done.
                if downstream in done or any(t.exception() is not None for t in done):
                    break
        finally:
            for task in pumps:
                task.cancel()
            await asyncio.gather(*pumps, return_exceptions=True)
        return counts[0], counts[1]

    def _record(
        self,
        request: ProxyRequest | None,
        outcome: str,
        reason: str,
        *,
        rule: str | None = None,
        address: IPAddress | None = None,
        event: str = "egress.connect",
        **extra: Any,
    ) -> None:
        record: dict[str, Any] = {
            "event": event,
            "sandbox": self._sandbox,
            "subject": {"sandbox": self._sandbox, "team": self._team},
            "outcome": outcome,
            "reason": reason,
            "rule": rule,
            "method": request.method if request else None,
            "host": request.host if request else None,
            "port": request.port if request else None,
            "address": str(address) if address is not None else None,
            **extra,
        }
        try:
            self._audit.append(record)
        except AuditUnavailable as exc:
            log.error("egress.audit_failed", sandbox=self._sandbox, error=exc.message)
            if outcome != "closed":
                # SECURITY: fail closed: no tunnel opens unaudited.
                raise Refused(503, "audit_unavailable", "audit_unavailable", exc.message) from None

    async def _refuse(self, writer: asyncio.StreamWriter, refused: Refused) -> None:
        with contextlib.suppress(ConnectionError):
            writer.write(refused.answer())
            await asyncio.wait_for(writer.drain(), 5.0)
