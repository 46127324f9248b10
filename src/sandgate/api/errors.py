"""The one table that turns Sandgate errors into HTTP and Connect-RPC answers."""

from __future__ import annotations

from typing import Final

from starlette.responses import JSONResponse

from sandgate.errors import SandgateError

__all__ = ["CONNECT_STATUS", "connect_code", "e2b_error", "e2b_error_response"]

#: Connect code → HTTP status (the Connect protocol's own mapping).
CONNECT_STATUS: Final = {
    "canceled": 499,
    "unknown": 500,
    "invalid_argument": 400,
    "deadline_exceeded": 504,
    "not_found": 404,
    "already_exists": 409,
    "permission_denied": 403,
    "resource_exhausted": 429,
    "failed_precondition": 400,
    "aborted": 409,
    "out_of_range": 400,
    "unimplemented": 501,
    "internal": 500,
    "unavailable": 503,
    "data_loss": 500,
    "unauthenticated": 401,
}

_STATUS_TO_CONNECT: Final = {
    400: "invalid_argument",
    401: "unauthenticated",
    403: "permission_denied",
    404: "not_found",
    409: "already_exists",
    413: "resource_exhausted",
    429: "resource_exhausted",
    501: "unimplemented",
    502: "unavailable",
    503: "unavailable",
    507: "resource_exhausted",
}


def connect_code(error: SandgateError) -> str:
    return _STATUS_TO_CONNECT.get(error.status, "internal")


def e2b_error(status: int, message: str) -> dict[str, object]:
    """E2B's error body: both keys are required by the generated Python client."""
    return {"code": status, "message": message}


def e2b_error_response(error: SandgateError) -> JSONResponse:
    body = e2b_error(error.status, error.message)
    body["error_code"] = error.code
    return JSONResponse(body, status_code=error.status)
