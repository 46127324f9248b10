"""The envd data plane of one sandbox (port 49983), served by the gateway.

The router has already resolved the sandbox and checked its access token; handlers find the
sandbox's guest in ``scope["sandgate.route"]``. Every RPC error is answered as Connect JSON.
"""

from __future__ import annotations

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from sandgate.api.e2b.compose import compose
from sandgate.api.e2b.connect import (
    STREAM_CONTENT_TYPE,
    RpcError,
    quiet_dropped_streams,
    rpc_error_response,
    stream_error_response,
)
from sandgate.api.e2b.envd_state import MetricsSource, envd_metrics_endpoint, init
from sandgate.api.e2b.files import download, upload_endpoint
from sandgate.api.e2b.filesystem import FILESYSTEM_METHODS
from sandgate.api.e2b.process import PROCESS_METHODS
from sandgate.api.e2b.unserved import ENVD_UNSERVED, unserved_error
from sandgate.api.e2b.uploads import UploadLimits
from sandgate.guest.client import GuestClient, GuestError

__all__ = ["build_envd_app"]

_SERVICES = {"process.Process": PROCESS_METHODS, "filesystem.Filesystem": FILESYSTEM_METHODS}


async def health(request: Request) -> Response:
    """204 while the guest answers; 502 (\"not running\") once it does not."""
    route = request.scope["sandgate.route"]
    try:
        await route.guest.ping()
    except GuestError:  # GuestUnavailable included
        return JSONResponse(
            {"sandboxId": route.sandbox_id, "message": "The sandbox was not found", "code": 502},
            status_code=502,
        )
    return Response(status_code=204)


async def rpc(request: Request) -> Response:
    service = request.path_params["service"]
    method = request.path_params["method"]
    handler = _SERVICES.get(service, {}).get(method)
    if handler is None and unserved_error(ENVD_UNSERVED, "POST", request.url.path):
        return await _no_route(request, HTTPException(404))  # envd REST, not an RPC
    try:
        if handler is None:
            raise RpcError("unimplemented", f"{service}/{method} is not implemented")
        return await handler(request)
    except RpcError as exc:
        media = request.headers.get("content-type", "").split(";")[0].strip()
        if media == STREAM_CONTENT_TYPE:
            return stream_error_response(exc)
        return rpc_error_response(exc)


async def envs(request: Request) -> Response:
    guest: GuestClient = request.scope["sandgate.route"].guest
    try:
        return JSONResponse(await guest.envs())
    except GuestError:  # GuestUnavailable included
        return JSONResponse({"code": 502, "message": "the sandbox is not reachable"}, 502)


async def _no_route(request: Request, exc: Exception) -> Response:
    """envd paths nothing serves: 501 naming the feature for E2B's, a clear 404/405 else."""
    status = exc.status_code if isinstance(exc, HTTPException) else 404
    missing = unserved_error(ENVD_UNSERVED, request.method, request.url.path)
    if missing is not None:
        body = {"code": missing.status, "message": missing.message, "error_code": missing.code}
        return JSONResponse(body, status_code=missing.status)
    where = f"{request.method} {request.url.path[:200]}"
    message = f"envd does not allow {where}" if status == 405 else f"no such envd endpoint: {where}"
    return JSONResponse({"code": status, "message": message}, status_code=status)


def build_envd_app(uploads: UploadLimits, metrics: MetricsSource | None = None) -> Starlette:
    """``metrics`` reads a sandbox now, for envd's ``GET /metrics`` (502 without it)."""
    quiet_dropped_streams()
    return Starlette(
        exception_handlers={404: _no_route, 405: _no_route},
        routes=[
            Route("/health", health, methods=["GET"]),
            Route("/envs", envs, methods=["GET"]),
            Route("/metrics", envd_metrics_endpoint(metrics), methods=["GET"]),
            Route("/init", init, methods=["POST"]),
            Route("/files", download, methods=["GET"]),
            Route("/files", upload_endpoint(uploads), methods=["POST"]),
            Route("/files/compose", compose, methods=["POST"]),
            Route("/{service}/{method}", rpc, methods=["POST"]),
        ],
    )
