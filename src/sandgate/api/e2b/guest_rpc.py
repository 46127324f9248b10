"""What envd handlers share: the sandbox's guest, and unary calls whose guest errors become
Connect errors (the guest already speaks Connect's error codes)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from starlette.requests import Request
from starlette.responses import Response

from sandgate.api.e2b.connect import RpcError, read_unary_request, unary_response
from sandgate.guest.client import GuestClient, GuestError

__all__ = ["guest_of", "unary_call"]


def guest_of(request: Request) -> GuestClient:
    """The guest of the sandbox the router resolved for this request."""
    guest: GuestClient = request.scope["sandgate.route"].guest
    return guest


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
