"""The gateway's end of a sandbox's egress: ``<host_dir>/egress.sock``, one tunnel per
connection.

Trust: everything arriving on the socket comes from code inside one sandbox and is hostile.
The caller is the sandbox the socket belongs to (fixed when the socket is created); nothing in
a request can name another sandbox (NET-18). Enforced here, per connection: request syntax
(``request``), the sandbox's rules (``rules``), host canonicalisation (``names``), resolution
by the gateway (``resolver``), address ranges (``addresses``), a cap on open tunnels, idle and
total time limits, and one audit record per decision plus one when an allowed tunnel closes
(with byte counts). Not done here: TLS interception, SNI checks, secret substitution (see
docs/threat-model.md, "Egress"); the absence of any other route out of the sandbox is the
runtime's job (no network interface but loopback).

Wire: the sandbox side speaks plain HTTP/1.1 proxy requests (the guest's relay on
``127.0.0.1:3128`` just copies bytes to this socket). Refusals are HTTP answers with
``X-Sandgate-Error`` (``destination_denied``, ``bad_request``, ``too_many_tunnels``,
``upstream_unavailable``, ``audit_unavailable``) and ``X-Sandgate-Reason`` (e.g.
``host_not_allowed``, ``ip_literal``, ``resolved_to_private``, ``metadata_address``).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from dataclasses import dataclass
from typing import Any, Final

import structlog

from sandgate.audit import AuditLog
from sandgate.egress.addresses import address_refusal
from sandgate.egress.names import InvalidHost, IPAddress, canonical_host, format_host
from sandgate.egress.request import MAX_HEAD, BadRequest, ProxyRequest, parse_request
from sandgate.egress.resolver import ResolutionFailed, Resolver
from sandgate.egress.rules import EgressPolicy
from sandgate.errors import AuditUnavailable
from sandgate.sandboxes.listener import SandboxListener

__all__ = ["EgressSocket", "TunnelLimits"]

log = structlog.get_logger("sandgate.egress")

_HEAD_TIMEOUT_S: Final = 30.0
_CHUNK: Final = 64 * 1024
_STATUS_TEXT: Final = {
    400: "Bad Request",
    403: "Forbidden",
    429: "Too Many Requests",
    502: "Bad Gateway",
    503: "Service Unavailable",
}


@dataclass(frozen=True)
class TunnelLimits:
    max_tunnels: int = 32
    connect_timeout_s: float = 10.0
    idle_timeout_s: float = 300.0
    max_tunnel_s: float = 3600.0


class _Refused(Exception):
    def __init__(self, status: int, error: str, reason: str, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.error = error
        self.reason = reason
        self.message = message


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
    ) -> None:
        self._sandbox = sandbox_id
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
                with contextlib.suppress(_Refused):
                    self._record(None, "denied", "too_many_tunnels")
                raise _Refused(
                    429,
                    "too_many_tunnels",
                    "too_many_tunnels",
                    f"this sandbox already has {self._limits.max_tunnels} open tunnels "
                    "(egress.max_tunnels_per_sandbox); close some first",
                )
            await self._tunnel(reader, writer)
        except _Refused as refused:
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
            raise _Refused(400, "bad_request", "bad_request", message) from None
        address, upstream = await self._open(request)
        up_reader, up_writer = upstream
        try:
            if request.is_connect:
                writer.write(b"HTTP/1.1 200 Connection Established\r\n\r\n")
            else:
                up_writer.write(request.upstream_head)
            started = time.monotonic()
            sent, received = await self._splice(reader, writer, up_reader, up_writer)
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
        )

    async def _open(
        self, request: ProxyRequest
    ) -> tuple[IPAddress, tuple[asyncio.StreamReader, asyncio.StreamWriter]]:
        """Decides, resolves, checks and connects; raises ``_Refused``."""
        try:
            host = canonical_host(request.host)
        except InvalidHost as exc:
            self._record(request, "denied", "invalid_host", detail=str(exc))
            raise _Refused(403, "destination_denied", "invalid_host", str(exc)) from None
        decision = self._policy.decide(host, request.port)
        target = f"{format_host(host)}:{request.port}"
        if not decision.allowed:
            self._record(request, "denied", decision.reason, rule=decision.rule)
            raise _Refused(
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
            raise _Refused(502, "upstream_unavailable", "resolution_failed", str(exc)) from None
        # SECURITY: every answer is checked, not just the one we dial, and the dial below
        # uses these exact addresses: no second lookup for rebinding to exploit (NET-05).
        for address in addresses:
            refusal = address_refusal(address, decision.networks)
            if refusal is not None:
                self._record(request, "denied", refusal, rule=decision.rule, address=address)
                raise _Refused(
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
            except _Refused:
                upstream[1].transport.abort()
                raise
            return address, upstream
        self._record(request, "denied", "connect_failed", rule=decision.rule)
        message = f"cannot connect to {target}: {last_error}"
        raise _Refused(502, "upstream_unavailable", "connect_failed", message)

    async def _splice(
        self,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        up_reader: asyncio.StreamReader,
        up_writer: asyncio.StreamWriter,
    ) -> tuple[int, int]:
        counts = [0, 0]
        idle = self._limits.idle_timeout_s

        async def pump(src: asyncio.StreamReader, dst: asyncio.StreamWriter, slot: int) -> None:
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
                raise _Refused(503, "audit_unavailable", "audit_unavailable", exc.message) from None

    async def _refuse(self, writer: asyncio.StreamWriter, refused: _Refused) -> None:
        body = f"sandgate egress: {refused.error} ({refused.reason}): {refused.message}\n".encode()
        head = (
            f"HTTP/1.1 {refused.status} {_STATUS_TEXT.get(refused.status, 'Error')}\r\n"
            f"Content-Type: text/plain; charset=utf-8\r\n"
            f"X-Sandgate-Error: {refused.error}\r\n"
            f"X-Sandgate-Reason: {refused.reason}\r\n"
            f"Content-Length: {len(body)}\r\n"
            "Connection: close\r\n\r\n"
        ).encode()
        with contextlib.suppress(ConnectionError):
            writer.write(head + body)
            await asyncio.wait_for(writer.drain(), 5.0)
