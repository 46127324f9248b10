"""How Sandgate errors are answered at the HTTP edge (E2B's JSON body) and the Connect edge.

Nothing here decides a status: each error's HTTP ``status`` and Connect code are declared on its
class in ``sandgate.errors``, and :data:`CONNECT_STATUS` (the Connect protocol's table) lives
there too."""

from __future__ import annotations

from starlette.responses import JSONResponse

from sandgate.errors import CONNECT_STATUS, SandgateError

__all__ = ["CONNECT_STATUS", "e2b_error", "e2b_error_response"]


def e2b_error(status: int, message: str) -> dict[str, object]:
    """E2B's error body: both keys are required by the generated Python client."""
    return {"code": status, "message": message}


def e2b_error_response(error: SandgateError) -> JSONResponse:
    body = e2b_error(error.status, error.message)
    body["error_code"] = error.code
    return JSONResponse(body, status_code=error.status)
