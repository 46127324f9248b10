"""What envd handlers share: the sandbox's guest, unary calls whose guest errors become
Connect errors (the guest already speaks Connect's error codes), and the translation of a
guest's refusal into Sandgate's error tree for the plain-HTTP endpoints."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, Final

from starlette.requests import Request
from starlette.responses import Response

from sandgate.api.e2b.connect import RpcError, read_unary_request, unary_response
from sandgate.errors import (
    Conflict,
    DiskFull,
    Forbidden,
    InvalidRequest,
    NotFound,
    QuotaExceeded,
    SandboxUnavailable,
    SandgateError,
    Unauthenticated,
)
from sandgate.guest.client import GuestClient, GuestError, GuestUnavailable
from sandgate.guest.protocol import DISK_FULL

__all__ = ["guest_failure", "guest_of", "unary_call"]

#: Guest protocol code → Sandgate error; the status of each is set once, in errors.py.
_BY_CODE: Final[dict[str, type[SandgateError]]] = {
    "invalid_argument": InvalidRequest,
    "failed_precondition": InvalidRequest,
    "unauthenticated": Unauthenticated,
    "permission_denied": Forbidden,
    "not_found": NotFound,
    "already_exists": Conflict,
    "resource_exhausted": QuotaExceeded,
    "unavailable": SandboxUnavailable,
}
_BY_REASON: Final[dict[str, type[SandgateError]]] = {DISK_FULL: DiskFull}


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
    kind = _BY_REASON.get(exc.reason or "") or _BY_CODE.get(exc.code, SandgateError)
    return kind(exc.message)


async def unary_call(
    request: Request, call: Callable[[dict[str, Any]], Awaitable[Any]]
) -> Response:
    """Reads a unary request, runs ``call`` on it and answers its dict (or ``{}``)."""
    message = await read_unary_request(request)
    try:
        result = await call(message)
    except GuestError as exc:  # GuestUnavailable included: code "unavailable"
        raise RpcError(exc.code, exc.message) from None
    return unary_response(result if isinstance(result, dict) else {})
