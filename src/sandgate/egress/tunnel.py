"""The gateway's end of a sandbox's egress: ``<host_dir>/egress.sock``, one tunnel per
connection.

Trust: everything arriving on the socket comes from code inside one sandbox and is hostile.
The caller is the sandbox the socket belongs to (fixed when the socket is created); nothing in
a request can name another sandbox (NET-18). Enforced here, per connection: request syntax
(``request``), the sandbox's rules (``rules``), host canonicalisation (``names``), resolution
by the gateway (``resolver``), address ranges (``addresses``), a cap on open tunnels, idle and
total time limits, one audit record per decision plus one when an allowed tunnel closes
(with byte counts).

Every HTTP request the proxy can read is forwarded by ``exchange``, one per connection, after
its ``Host`` was checked against the authority the policy allowed (``authority``; a mismatch
is 400, never a rewrite): absolute-form requests (checked before anything is dialled), plain
HTTP inside a CONNECT tunnel (recognised from its first bytes), and HTTPS in tunnels to a
host:port one of the sandbox's secrets is bound to, which are terminated (``intercept``).
Other CONNECT tunnels are spliced byte for byte; for TLS ones the ClientHello's server name
must be the CONNECT host (NET-08). The absence of any other route out of the sandbox is the
runtime's job (no network interface but loopback).

Wire: the sandbox side speaks plain HTTP/1.1 proxy requests (the guest's relay on
``127.0.0.1:3128`` just copies bytes to this socket). Refusals are HTTP answers (``refusal``).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import ssl
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Final

import h11
import structlog

from sandgate.audit import AuditLog
from sandgate.config import PACKAGE_REGISTRIES, preset_of
from sandgate.egress.addresses import address_refusal
from sandgate.egress.authority import HTTP_PORT, HTTPS_PORT, Authority, check_host_header
from sandgate.egress.clienthello import FirstFlight, Malformed, read_first_flight
from sandgate.egress.exchange import (
    ClientStream,
    Exchange,
    PlainStream,
    checked_head,
    exchange,
    read_head,
)
from sandgate.egress.intercept import TlsServerStream
from sandgate.egress.names import Host, InvalidHost, IPAddress, canonical_host, format_host
from sandgate.egress.placeholders import SandboxSecrets
from sandgate.egress.refusal import Refused
from sandgate.egress.request import (
    MAX_HEAD,
    BadRequest,
    Head,
    ProxyRequest,
    parse_head,
    parse_request,
    read_http_head,
)
from sandgate.egress.resolver import ResolutionFailed, Resolver
from sandgate.egress.rules import Decision, EgressPolicy
from sandgate.egress.tls import EgressCA
from sandgate.errors import AuditUnavailable
from sandgate.sandboxes.listener import SandboxListener

__all__ = ["EgressSocket", "Interception", "TunnelLimits"]

log = structlog.get_logger("sandgate.egress")

_HEAD_TIMEOUT_S: Final = 30.0
#: How long a connection over the tunnel cap may take to send its request before its 429.
_REFUSAL_READ_S: Final = 2.0
#: How long a refusal waits for its denial records to be durable before it is answered.
_SETTLE_S: Final = 2.0
_CHUNK: Final = 64 * 1024
_Upstream = tuple[asyncio.StreamReader, asyncio.StreamWriter]


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


class _HttpInTunnel(Exception):
    """A spliced CONNECT tunnel's first bytes are an HTTP request: forward it as one."""

    def __init__(self, data: bytes) -> None:
        super().__init__("plain HTTP in a tunnel")
        self.data = data


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
        #: Where each open tunnel goes (canonical host, port), for ``replace``.
        self._destinations: dict[asyncio.Task[None], tuple[Host, int]] = {}
        #: Records handed to the writer and not yet durable (``_settle``).
        self._unsettled: set[concurrent.futures.Future[dict[str, Any]]] = set()
        super().__init__()

    @property
    def open_tunnels(self) -> int:
        return len(self._tasks)

    @property
    def policy(self) -> EgressPolicy:
        return self._policy

    @property
    def interception(self) -> Interception | None:
        return self._interception

    def replace(self, policy: EgressPolicy, interception: Interception | None) -> list[str]:
        """Swaps in a new policy and header rules (``update_network``): new connections are
        judged by them at once. An open tunnel the new policy refuses, or whose TLS handling
        changes (a rule added or removed for its host), is cut, with an audit record, so a
        revoked destination loses its connections too and no tunnel keeps injecting a removed
        secret. Returns the ``host:port`` of the tunnels cut."""
        before = self._interception
        self._policy, self._interception = policy, interception
        cut = []
        for task, (host, port) in list(self._destinations.items()):
            was = before is not None and before.secrets.intercepts(host, port)
            now = interception is not None and interception.secrets.intercepts(host, port)
            if policy.decide(host, port).allowed and was == now:
                continue
            task.cancel()
            target = f"{format_host(host)}:{port}"
            cut.append(target)
            with contextlib.suppress(Refused):
                self._record(None, "closed", "policy_updated", event="egress.close", target=target)
        return cut

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
                # The request is read (briefly) before the answer: closing a socket with
                # unread bytes resets it, and the reset can overtake the 429 on its way.
                with contextlib.suppress(
                    TimeoutError,
                    ConnectionError,
                    asyncio.IncompleteReadError,
                    asyncio.LimitOverrunError,
                ):
                    async with asyncio.timeout(_REFUSAL_READ_S):
                        await reader.readuntil(b"\r\n\r\n")
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
            self._destinations.pop(task, None)
            try:
                await self._settle()
            finally:
                writer.transport.abort()

    async def _tunnel(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            async with asyncio.timeout(_HEAD_TIMEOUT_S):
                head = await reader.readuntil(b"\r\n\r\n")
            request = parse_request(head)
        except (asyncio.LimitOverrunError, ValueError) as exc:
            bad = exc if isinstance(exc, BadRequest) else BadRequest("request head too large")
            self._record(None, "denied", bad.reason, detail=str(bad))
            raise Refused(400, "bad_request", bad.reason, str(bad)) from None
        host, decision = self._decide(request)
        task = asyncio.current_task()
        if task is not None:
            self._destinations[task] = (host, request.port)
        addresses = await self._resolve(request, host, decision)
        authority = Authority(host, request.port)
        if not request.is_connect:
            # SECURITY: before anything is dialled; the upstream never sees a request whose
            # Host names another site than the one the policy allowed (NET-08).
            try:
                check_host_header(
                    request.head,
                    authority,
                    default_port=HTTP_PORT,
                    required=request.head.version != b"HTTP/1.0",
                )
            except BadRequest as bad:
                self._record_bad(request, request.head, bad, event="egress.connect")
                raise Refused(400, "bad_request", bad.reason, str(bad)) from None
        address, (up_reader, up_writer) = await self._connect(request, addresses, decision)
        started = time.monotonic()
        closing: dict[str, Any] = {}
        sent = received = 0
        try:
            if not request.is_connect:
                sent, received = await self._forward(
                    PlainStream(reader, writer),
                    head,
                    request.head,
                    (reader, writer),
                    (up_reader, up_writer),
                    request,
                    authority,
                    HTTP_PORT,
                    request.origin_target,
                    closing,
                )
            else:
                writer.write(b"HTTP/1.1 200 Connection Established\r\n\r\n")
                interception = self._interception
                if interception is not None and interception.secrets.intercepts(host, request.port):
                    sent, received = await self._intercept(
                        reader, writer, up_reader, up_writer, request, interception, closing
                    )
                else:
                    sent, received = await self._connect_tunnel(
                        reader, writer, up_reader, up_writer, request, authority, closing
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

    async def _connect_tunnel(
        self,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        up_reader: asyncio.StreamReader,
        up_writer: asyncio.StreamWriter,
        request: ProxyRequest,
        authority: Authority,
        closing: dict[str, Any],
    ) -> tuple[int, int]:
        """A tunnel the proxy does not terminate: spliced, unless its first bytes are a
        plain HTTP request, which is checked and forwarded like an absolute-form one."""
        try:
            return await self._splice(
                reader,
                writer,
                up_reader,
                up_writer,
                first=lambda: self._first_flight(reader, request, authority.host),
            )
        except _HttpInTunnel as switch:
            buffered = switch.data
        client = PlainStream(reader, writer)
        try:
            head = checked_head(buffered, authority, default_port=HTTP_PORT)
        except BadRequest as bad:
            return await self._refuse_in_tunnel(client, buffered, request, bad, closing)
        return await self._forward(
            client,
            buffered,
            head,
            (reader, writer),
            (up_reader, up_writer),
            request,
            authority,
            HTTP_PORT,
            head.target,
            closing,
        )

    async def _first_flight(
        self, reader: asyncio.StreamReader, request: ProxyRequest, host: Host
    ) -> bytes:
        """The client's first bytes, after checking a TLS server name against the CONNECT
        host (NET-08); raises ``ConnectionError`` to end the tunnel and ``_HttpInTunnel``
        when the client speaks plain HTTP."""
        flight = await self._checked_flight(reader, request, host)
        if flight.is_tls:
            return flight.raw
        try:
            data, is_http = await read_http_head(reader, flight.raw, _HEAD_TIMEOUT_S)
        except TimeoutError:
            # SECURITY: a stalled HTTP start is closed, not spliced, so waiting cannot skip
            # the Host check.
            self._record(request, "denied", "http_head_timeout", event="egress.request")
            raise ConnectionError("plain HTTP head did not arrive") from None
        if is_http:
            raise _HttpInTunnel(data)
        return data

    async def _checked_flight(
        self, reader: asyncio.StreamReader, request: ProxyRequest, host: Host
    ) -> FirstFlight:
        try:
            async with asyncio.timeout(_HEAD_TIMEOUT_S):
                flight = await read_first_flight(reader)
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
        authority = Authority(host, request.port)
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
        try:
            buffered = await read_head(client, self._limits.idle_timeout_s)
        except BadRequest as bad:
            return await self._refuse_in_tunnel(client, b"", request, bad, closing)
        try:
            head = checked_head(buffered, authority, default_port=HTTPS_PORT)
        except BadRequest as bad:
            return await self._refuse_in_tunnel(client, buffered, request, bad, closing)

        async def upstream_tls() -> None:
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

        return await self._forward(
            client,
            buffered,
            head,
            None,
            (up_reader, up_writer),
            request,
            authority,
            HTTPS_PORT,
            head.target,
            closing,
            secrets=interception.secrets,
            before=upstream_tls,
        )

    async def _forward(
        self,
        client: ClientStream,
        buffered: bytes,
        head: Head,
        plain: _Upstream | None,
        upstream: _Upstream,
        request: ProxyRequest,
        authority: Authority,
        default_port: int,
        target: str,
        closing: dict[str, Any],
        *,
        secrets: SandboxSecrets | None = None,
        before: Callable[[], Awaitable[None]] | None = None,
    ) -> tuple[int, int]:
        """One checked request and its response (``exchange``); ``plain`` is the client's
        own connection when it is not encrypted, so an accepted upgrade can be spliced."""
        up_reader, up_writer = upstream
        result = Exchange()

        async def audit_request(done: Exchange) -> None:
            reason = "forwarded" if secrets is None else "intercepted"
            pending = self._record(
                request,
                "allowed",
                "secret_substituted" if done.secrets else reason,
                event="egress.request",
                http_method=done.method,
                path=done.path,
                secrets=done.secrets,
            )
            await self._durable(pending)

        try:
            if before is not None:
                await before()
            await exchange(
                client,
                buffered,
                head,
                up_reader,
                up_writer,
                authority=authority,
                default_port=default_port,
                target=target,
                secrets=secrets,
                audit_request=audit_request,
                idle_timeout_s=self._limits.idle_timeout_s,
                result=result,
            )
        except h11.ProtocolError as exc:
            closing["ended"] = str(exc)[:200]
        except Refused as refused:
            if result.status is None:  # nothing of a response was sent yet
                await self._settle()
                with contextlib.suppress(ConnectionError, ssl.SSLError):
                    await client.write(refused.answer())
            closing["refused"] = refused.reason
        closing["status"] = result.status
        sent, received = result.bytes_up, result.bytes_down
        if result.switched and plain is not None:
            reader, writer = plain
            up_writer.write(result.client_rest)
            writer.write(result.upstream_rest)
            more_up, more_down = await self._splice(reader, writer, up_reader, up_writer)
            sent += len(result.client_rest) + more_up
            received += len(result.upstream_rest) + more_down
        return sent, received

    async def _refuse_in_tunnel(
        self,
        client: ClientStream,
        buffered: bytes,
        request: ProxyRequest,
        bad: BadRequest,
        closing: dict[str, Any],
    ) -> tuple[int, int]:
        """Answers a request inside a tunnel with 400, audited; nothing goes upstream."""
        head: Head | None = None
        end = buffered.find(b"\r\n\r\n")
        if end >= 0:
            with contextlib.suppress(BadRequest):
                head = parse_head(buffered[: end + 4])
        self._record_bad(request, head, bad, event="egress.request")
        refused = Refused(400, "bad_request", bad.reason, str(bad))
        await self._settle()
        with contextlib.suppress(ConnectionError, ssl.SSLError):
            await client.write(refused.answer())
        closing["refused"] = bad.reason
        closing["status"] = 400
        return 0, 0

    def _decide(self, request: ProxyRequest) -> tuple[Host, Decision]:
        """The canonical host and the policy's verdict; raises ``Refused`` (403)."""
        try:
            host = canonical_host(request.host)
        except InvalidHost as exc:
            self._record(request, "denied", "invalid_host", detail=str(exc))
            raise Refused(403, "destination_denied", "invalid_host", str(exc)) from None
        decision = self._policy.decide(host, request.port)
        if not decision.allowed:
            self._record(request, "denied", decision.reason, rule=decision.rule)
            raise Refused(
                403,
                "destination_denied",
                decision.reason,
                _not_allowed(host, request.port, decision.reason),
            )
        return host, decision

    async def _resolve(
        self, request: ProxyRequest, host: Host, decision: Decision
    ) -> list[IPAddress]:
        """Every address of ``host``, each checked; raises ``Refused``."""
        target = f"{format_host(host)}:{request.port}"
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
        return addresses

    async def _connect(
        self, request: ProxyRequest, addresses: list[IPAddress], decision: Decision
    ) -> tuple[IPAddress, _Upstream]:
        """Connects to the first checked address that answers; raises ``Refused``."""
        last_error = "no address"
        for address in addresses:
            try:
                async with asyncio.timeout(self._limits.connect_timeout_s):
                    upstream = await asyncio.open_connection(str(address), request.port)
            except (OSError, TimeoutError) as exc:
                last_error = f"{address}: {exc or 'timed out'}"
                continue
            try:
                await self._durable(
                    self._record(request, "allowed", "allowed", rule=decision.rule, address=address)
                )
            except Refused:
                upstream[1].transport.abort()
                raise
            return address, upstream
        self._record(request, "denied", "connect_failed", rule=decision.rule)
        message = f"cannot connect to {request.host}:{request.port}: {last_error}"
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
        the client's first bytes before anything of theirs goes upstream, and may raise
        ``_HttpInTunnel``, which is raised from here once both directions have stopped."""
        counts = [0, 0]
        idle = self._limits.idle_timeout_s

        async def pump(src: asyncio.StreamReader, dst: asyncio.StreamWriter, slot: int) -> None:
            if slot == 0 and first is not None:
                data = await first()
                counts[0] += len(data)
                dst.write(data)
                await dst.drain()
            while True:
                async with asyncio.timeout(idle):
                    data = await src.read(_CHUNK)
                if not data:
                    break
                counts[slot] += len(data)
                dst.write(data)
                await dst.drain()
            if dst.can_write_eof():
                dst.write_eof()

        downstream = asyncio.ensure_future(pump(up_reader, writer, 1))
        upstream = asyncio.ensure_future(pump(reader, up_writer, 0))
        pumps = {upstream, downstream}
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
        switch = None if upstream.cancelled() else upstream.exception()
        if isinstance(switch, _HttpInTunnel):
            raise switch
        return counts[0], counts[1]

    def _record_bad(
        self, request: ProxyRequest, head: Head | None, bad: BadRequest, *, event: str
    ) -> None:
        hosts = head.values(b"host") if head is not None else []
        self._record(
            request,
            "denied",
            bad.reason,
            event=event,
            detail=str(bad)[:300],
            http_method=head.method if head is not None else None,
            host_header=[h[:256].decode("latin-1") for h in hosts],
        )

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
    ) -> concurrent.futures.Future[dict[str, Any]] | None:
        """Hands the record to the audit writer without waiting (the loop never blocks on
        the log); returns its future, which paths that let traffic through await before they
        do. Raises ``Refused`` (503) while the log is known to be unwritable or tampered."""
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
            pending = self._audit.submit(record)
        except AuditUnavailable as exc:
            log.error("egress.audit_failed", sandbox=self._sandbox, error=exc.message)
            if outcome != "closed":
                # SECURITY: fail closed: no tunnel opens unaudited.
                raise Refused(503, "audit_unavailable", "audit_unavailable", exc.message) from None
            return None
        self._unsettled.add(pending)
        pending.add_done_callback(self._unsettled.discard)
        return pending

    async def _settle(self) -> None:
        """Waits (briefly) until this sandbox's records are durable. A refusal is answered,
        and a connection closed, only after that, so whoever sees the refusal or the end
        finds them in the log; a write that fails is the writer's to report."""
        if not self._unsettled:
            return
        waits = [asyncio.wrap_future(pending) for pending in list(self._unsettled)]
        for wait in waits:
            # Never cancelled (that would withdraw the record); its outcome is read, so a
            # failed write is not reported twice.
            wait.add_done_callback(_observed)
        await asyncio.wait(waits, timeout=_SETTLE_S)

    async def _durable(self, pending: concurrent.futures.Future[dict[str, Any]] | None) -> None:
        """Waits until a record that lets traffic through is durable; raises ``Refused``
        (503) when it could not be written, so nothing passes unaudited."""
        if pending is None:
            return
        try:
            await asyncio.wrap_future(pending)
        except AuditUnavailable as exc:
            log.error("egress.audit_failed", sandbox=self._sandbox, error=exc.message)
            # SECURITY: fail closed: no tunnel opens and no request leaves unaudited.
            raise Refused(503, "audit_unavailable", "audit_unavailable", exc.message) from None

    async def _refuse(self, writer: asyncio.StreamWriter, refused: Refused) -> None:
        await self._settle()
        with contextlib.suppress(ConnectionError):
            writer.write(refused.answer())
            async with asyncio.timeout(5.0):
                await writer.drain()


def _observed(wait: asyncio.Future[Any]) -> None:
    if not wait.cancelled():
        wait.exception()


def _not_allowed(host: Host, port: int, reason: str) -> str:
    """What a refused client is told: the destination, and the line of config that would
    let it through (a registry preset, when one covers it)."""
    target = f"{format_host(host)}:{port}"
    if reason == "port_blocked":
        return f"{target} is not allowed (port {port} is always refused)"
    if reason == "denied_by_request":
        return f"{target} is not allowed (the create call's network.denyOut refuses it)"
    preset = preset_of(host, port) if isinstance(host, str) else None
    if preset in PACKAGE_REGISTRIES:
        hint = (
            f"allow it with egress.allow: [{preset}], or start sandgate serve with "
            "--allow-package-registries"
        )
    elif preset is not None:
        hint = f"allow it with egress.allow: [{preset}]"
    elif reason == "ip_literal":
        hint = "sandboxes reach hosts by name; an address needs its own egress rule"
    else:
        hint = f'ask the operator to allow it, e.g. egress.allow: ["{target}"]'
    return f"{target} is not allowed ({hint})"
