"""What envd handlers share: the sandbox's guest, unary calls whose guest errors become
Connect errors (the guest already speaks Connect's error codes), the end of a stream whose
guest went away, and the translation of a guest's refusal into Sandgate's error tree for the
plain-HTTP endpoints."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, Final

import structlog
from starlette.requests import Request
from starlette.responses import Response

from sandgate.api.e2b.connect import RpcError, StreamDropped, read_unary_request, unary_response
from sandgate.errors import SandboxUnavailable, SandgateError, guest_kind
from sandgate.guest.client import GuestClient, GuestError, GuestUnavailable

__all__ = ["guest_failure", "guest_of", "stream_failure", "unary_call"]

log = structlog.get_logger("sandgate.api.e2b")

#: How long a stream whose guest connection broke waits for the guest to answer a ping.
_ALIVE_CHECK_S: Final = 2.0


def guest_of(request: Request) -> GuestClient:
    """The guest of the sandbox the router resolved for this request."""
    guest: GuestClient = request.scope["sandgate.route"].guest
    return guest


def guest_failure(exc: GuestError) -> SandgateError:
    """The Sandgate error for a guest's refusal, so that one condition has one status on
    every runtime (a full disk is ``disk_full`` whether the kernel said ENOSPC, EDQUOT or
    EFBIG). An unreachable guest's message names host paths; it is not passed on."""
    if isinstance(exc, GuestUnavailable):
        return SandboxUnavailable("the sandbox is not reachable: it stopped or is being killed")
    return guest_kind(exc.connect, exc.reason)(exc.message)


async def stream_failure(request: Request, error: GuestError) -> RpcError:
    """What ends a stream (process output, a watch) that failed with ``error``: the Connect
    error to send, or, when the guest connection broke and the guest no longer answers (the
    sandbox was killed or died), :class:`StreamDropped` is raised so that the connection drops
    as envd's would, and clients report the sandbox as killed."""
    if isinstance(error, GuestUnavailable):
        try:
            await guest_of(request).ping(timeout_s=_ALIVE_CHECK_S)
        except GuestError:
            sandbox_id = request.scope["sandgate.route"].sandbox_id
            log.info("e2b.stream_dropped", sandbox_id=sandbox_id, reason="sandbox gone")
            raise StreamDropped(f"sandbox {sandbox_id} is gone") from None
    return RpcError(error.connect, error.message)


async def unary_call(
    request: Request, call: Callable[[dict[str, Any]], Awaitable[Any]]
) -> Response:
    """Reads a unary request, runs ``call`` on it and answers its dict (or ``{}``)."""
    message = await read_unary_request(request)
    try:
        result = await call(message)
    except GuestError as exc:  # GuestUnavailable included: code "unavailable"
        raise RpcError(exc.connect, exc.message) from None
    return unary_response(result if isinstance(result, dict) else {})
