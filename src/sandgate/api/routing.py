"""One port for everything: decide whether a request is control plane or a sandbox's data plane.

Rules, first match wins (shared/e2b-protocol.md §1.5):

1. ``Host: <port>-<id>.<anything>`` → data plane of ``<id>``, port ``<port>``;
2. ``E2b-Sandbox-Id`` + ``E2b-Sandbox-Port`` headers → data plane (both or neither);
3. ``/files`` with a ``signature`` query and no routing → the sandbox whose token signed it;
4. anything else → control plane.

SECURITY: a sandbox id is never a credential. Every envd request except ``GET /health`` must
carry the sandbox's access token (``X-Access-Token``), compared in constant time; a missing or
wrong token gets the same 401 as an unknown one. Other ports are private unless the sandbox was
created with ``network.allowPublicTraffic``: they need its ``trafficAccessToken`` in
``E2B-Traffic-Access-Token`` (as E2B with public traffic off), or the access token. Unknown
or dead sandboxes get E2B's 502 JSON, so SDKs report "sandbox not running"; that answer, and
``/health``'s, tell whether an id exists (as on E2B; ids are 129 random bits).
"""

from __future__ import annotations

import json
import re
from typing import Final
from urllib.parse import parse_qsl

from starlette.types import ASGIApp, Receive, Scope, Send

from sandgate.access import tokens_equal
from sandgate.api.e2b.files import signature_matches
from sandgate.sandboxes import Route, SandboxService

__all__ = ["ENVD_PORT", "Router"]

ENVD_PORT: Final = 49983
_HOST: Final = re.compile(r"^(\d{1,5})-([a-z0-9]+)(?:\.|:|$)")
_ID: Final = re.compile(r"^[a-z0-9]{1,64}$")
_UNAUTHORIZED: Final = (
    "unauthorized access, please provide a valid access token or method signing if supported"
)
_PRIVATE_PORT: Final = (
    "this sandbox's ports are private: send its trafficAccessToken in the "
    "E2B-Traffic-Access-Token header (or create it with network.allowPublicTraffic=true)"
)


async def _json(send: Send, status: int, body: dict[str, object]) -> None:
    payload = json.dumps(body).encode()
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(payload)).encode()),
            ],
        }
    )
    await send({"type": "http.response.body", "body": payload})


class Router:
    """The outermost ASGI app: routes each request to the control plane or a data plane."""

    def __init__(
        self,
        control: ASGIApp,
        envd: ASGIApp,
        service: SandboxService,
        *,
        ports: ASGIApp | None = None,
    ) -> None:
        self._control = control
        self._envd = envd
        self._service = service
        self._ports = ports

    async def _signed_files(self, scope: Scope, receive: Receive, send: Send) -> None:
        """``/files`` with a signature and no routing: find the sandbox whose token signed it."""
        query = {k: v for k, v in parse_qsl(scope.get("query_string", b"").decode("latin-1"))}
        operation = "write" if scope.get("method") == "POST" else "read"
        route = self._service.route_by_signature(
            lambda token: signature_matches(query, operation, token)
        )
        if route is None:
            await _json(send, 401, {"code": 401, "message": _UNAUTHORIZED})
            return
        scope["sandgate.route"] = route
        scope["sandgate.port"] = ENVD_PORT
        await self._envd(scope, receive, send)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] not in ("http", "websocket"):
            await self._control(scope, receive, send)
            return
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope["headers"]}
        target = _target(headers)
        if target is None:
            if scope["path"] == "/files" and b"signature=" in scope.get("query_string", b""):
                await self._signed_files(scope, receive, send)
                return
            await self._control(scope, receive, send)
            return
        if isinstance(target, str):
            await _json(send, 400, {"code": 400, "message": target})
            return
        port, sandbox_id = target
        route = self._service.route(sandbox_id) if _ID.match(sandbox_id) else None
        if route is None:
            await _json(
                send,
                502,
                {"sandboxId": sandbox_id, "message": "The sandbox was not found", "code": 502},
            )
            return
        scope["sandgate.route"] = route
        scope["sandgate.port"] = port
        scope["sandgate.sandboxes"] = self._service
        if port == ENVD_PORT:
            if not _authorised(scope, headers, route):
                await _json(send, 401, {"code": 401, "message": _UNAUTHORIZED})
                return
            await self._envd(scope, receive, send)
            return
        if not _may_use_port(headers, route):
            await _json(send, 401, {"code": 401, "message": _PRIVATE_PORT})
            return
        if self._ports is None:
            await _json(
                send,
                502,
                {
                    "sandboxId": sandbox_id,
                    "message": "The sandbox is running but port is not open",
                    "port": port,
                    "code": 502,
                },
            )
            return
        await self._ports(scope, receive, send)


def _target(headers: dict[str, str]) -> tuple[int, str] | str | None:
    """(port, sandbox id), an error message, or None for the control plane."""
    match = _HOST.match(headers.get("host", ""))
    if match:
        return int(match.group(1)), match.group(2)
    sandbox_id = headers.get("e2b-sandbox-id")
    port = headers.get("e2b-sandbox-port")
    if sandbox_id is None and port is None:
        return None
    if sandbox_id is None:
        return "Missing header: E2b-Sandbox-Id"
    if port is None:
        return "Missing header: E2b-Sandbox-Port"
    if not port.isdigit() or not 0 < int(port) < 65536:
        return "Invalid header: E2b-Sandbox-Port must be a port number"
    return int(port), sandbox_id


def _authorised(scope: Scope, headers: dict[str, str], route: Route) -> bool:
    if scope["path"] == "/health" and scope.get("method") == "GET":
        return True
    token = headers.get("x-access-token")
    if token is not None:
        return tokens_equal(token, route.access_token)
    # /files may be authorised by a signature instead; its handler checks it.
    return scope["path"] == "/files" and b"signature=" in scope.get("query_string", b"")


def _may_use_port(headers: dict[str, str], route: Route) -> bool:
    if route.traffic_token is None:
        return True
    if tokens_equal(headers.get("e2b-traffic-access-token"), route.traffic_token):
        return True
    return tokens_equal(headers.get("x-access-token"), route.access_token)
