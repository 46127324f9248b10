"""The envd data plane of one sandbox (port 49983), served by the gateway.

The router has already resolved the sandbox and checked its access token; handlers find the
sandbox's guest in ``scope["sandgate.route"]``. Every RPC error is answered as Connect JSON.
"""

from __future__ import annotations

from sandgate.guest.client import GuestClient, GuestError, GuestUnavailable
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from sandgate.api.e2b.connect import RpcError, rpc_error_response
from sandgate.api.e2b.process import PROCESS_METHODS

__all__ = ["build_envd_app"]

_SERVICES = {"process.Process": PROCESS_METHODS}


async def health(_: Request) -> Response:
    return Response(status_code=204)


async def rpc(request: Request) -> Response:
    service = request.path_params["service"]
    method = request.path_params["method"]
    handler = _SERVICES.get(service, {}).get(method)
    try:
        if handler is None:
            raise RpcError("unimplemented", f"{service}/{method} is not implemented")
        return await handler(request)
    except RpcError as exc:
        return rpc_error_response(exc)


async def envs(request: Request) -> Response:
    guest: GuestClient = request.scope["sandgate.route"].guest
    try:
        return JSONResponse(await guest.envs())
    except (GuestError, GuestUnavailable):
        return JSONResponse({"code": 502, "message": "the sandbox is not reachable"}, 502)


def build_envd_app() -> Starlette:
    return Starlette(
        routes=[
            Route("/health", health, methods=["GET"]),
            Route("/envs", envs, methods=["GET"]),
            Route("/{service}/{method}", rpc, methods=["POST"]),
        ]
    )
