"""One port for everything: decide whether a request is control plane or a sandbox's data plane.

Rules, first match wins (shared/e2b-protocol.md §1.5):

1. ``Host: <port>-<id>.<anything>`` → data plane of ``<id>``, port ``<port>``;
2. ``E2b-Sandbox-Id`` + ``E2b-Sandbox-Port`` headers → data plane (both or neither);
3. ``/files`` with a ``signature`` query and no routing → the sandbox whose token signed it;
4. anything else → control plane.

Strict input: a port in either form is a canonical decimal in 1..65535 (no sign, spaces,
leading zeros or other digits than ASCII ``0-9``); anything else that takes the form's place
(``Host: 0-<id>``, ``-1-<id>``, ``080-<id>``, ``E2b-Sandbox-Port: 65536``) is ``400
invalid_port``, never a guess. The routing and credential headers may appear once each
(``400 invalid_request`` otherwise): a second ``X-Access-Token`` must not be what one reader
checks while another uses the first. Every request Sandgate itself decodes (control plane,
envd) must have a strictly percent-encoded target (``api.strict.check_target``).

WebSocket upgrades follow the same rules (and get the same JSON refusals, as HTTP responses to
the upgrade): to a sandbox port they are relayed (``ws_relay``); to envd and the control plane,
which serve none, they are refused, a foreign ``Origin`` first (AUTH-05); the one exception
is the web console's terminal (``/ui/sandboxes/<id>/terminal``), passed on from its own
origin only, where the console checks its session cookie.

SECURITY: a sandbox id is never a credential. Every envd request except ``GET /health`` must
carry the sandbox's access token (``X-Access-Token``), compared in constant time; a missing or
wrong token gets the same 401 as an unknown one. Other ports are private unless the sandbox was
created with ``network.allowPublicTraffic``: they need its ``trafficAccessToken`` in
``E2B-Traffic-Access-Token`` (as E2B with public traffic off), or the access token. Unknown
or dead sandboxes get E2B's 502 JSON, so SDKs report "sandbox not running"; that answer, and
``/health``'s, tell whether an id exists (as on E2B; ids are 129 random bits). A paused
sandbox created with ``autoResume`` is resumed by the first request that carries its token
(``Router._wake``), then served as usual.
"""

from __future__ import annotations

import re
from typing import Final
from urllib.parse import parse_qsl, urlsplit

from starlette.types import ASGIApp, Receive, Scope, Send

from sandgate.access import tokens_equal
from sandgate.api.e2b.files import signature_matches
from sandgate.api.errors import e2b_error
from sandgate.api.replies import send_json
from sandgate.api.strict import check_target
from sandgate.errors import InvalidPort, InvalidRequest, SandgateError
from sandgate.sandboxes import Route, SandboxService

__all__ = ["ENVD_PORT", "Router", "parse_port"]

ENVD_PORT: Final = 49983
#: The control-plane paths that serve WebSockets: the web console's terminals.
CONSOLE_WEBSOCKETS: Final = "/ui/sandboxes/"
#: The first label of a ``Host`` that claims the ``<port>-<id>`` form, valid port or not:
#: whatever precedes the first ``-`` (E2B splits there) and starts with a digit or a sign.
_HOST: Final = re.compile(r"^([0-9+][^-]*|-[^-]*)-([a-z0-9]+)$")
_PORT: Final = re.compile(r"^[1-9][0-9]{0,4}$")
_ID: Final = re.compile(r"^[a-z0-9]{1,64}$")
#: Headers that route a request or carry a credential: one of each at most.
_SINGLE: Final = frozenset(
    {
        b"host",
        b"e2b-sandbox-id",
        b"e2b-sandbox-port",
        b"x-access-token",
        b"e2b-traffic-access-token",
        b"x-api-key",
        b"authorization",
    }
)
_UNAUTHORIZED: Final = (
    "unauthorized access, please provide a valid access token or method signing if supported"
)
_PRIVATE_PORT: Final = (
    "this sandbox's ports are private: send its trafficAccessToken in the "
    "E2B-Traffic-Access-Token header (or create it with network.allowPublicTraffic=true; "
    "for clients that cannot send the token, such as E2B SDK 1.x, the operator can make "
    "public the default with sandbox.allow_public_traffic)"
)


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
            await send_json(scope, send, 401, {"code": 401, "message": _UNAUTHORIZED})
            return
        scope["sandgate.route"] = route
        scope["sandgate.port"] = ENVD_PORT
        await self._envd(scope, receive, send)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] not in ("http", "websocket"):
            await self._control(scope, receive, send)
            return
        try:
            headers = _single_headers(scope)
            target = _target(headers)
            if target is None or target[0] == ENVD_PORT:
                # SECURITY: user ports are relayed byte for byte, never decoded here.
                check_target(scope)
        except SandgateError as exc:
            body = {**e2b_error(exc.status, exc.message), "error_code": exc.code}
            await send_json(scope, send, exc.status, body)
            return
        if scope["type"] == "websocket" and (target is None or target[0] == ENVD_PORT):
            # SECURITY (AUTH-05): the console's terminal is the one control-plane WebSocket;
            # a foreign Origin is refused before it, and it checks Origin and session itself.
            console = target is None and str(scope["path"]).startswith(CONSOLE_WEBSOCKETS)
            if console and _foreign_origin(headers) is None:
                await self._control(scope, receive, send)
                return
            await _refuse_upgrade(scope, send, headers, "envd" if target else "control")
            return
        if target is None:
            if scope["path"] == "/files" and b"signature=" in scope.get("query_string", b""):
                await self._signed_files(scope, receive, send)
                return
            await self._control(scope, receive, send)
            return
        port, sandbox_id = target
        route = self._service.route(sandbox_id) if _ID.match(sandbox_id) else None
        if route is None and _ID.match(sandbox_id):
            route = await self._wake(sandbox_id, port, headers)
        if route is None:
            await send_json(
                scope,
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
                await send_json(scope, send, 401, {"code": 401, "message": _UNAUTHORIZED})
                return
            await self._envd(scope, receive, send)
            return
        if not _may_use_port(headers, route):
            await send_json(scope, send, 401, {"code": 401, "message": _PRIVATE_PORT})
            return
        if self._ports is None:
            await send_json(
                scope,
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

    async def _wake(self, sandbox_id: str, port: int, headers: dict[str, str]) -> Route | None:
        """Resumes a paused ``auto_resume`` sandbox for this request (E2B's auto-resume).

        SECURITY: only a request that would be let through once it runs wakes it: the access
        token on envd's port, the traffic token (or none, for public ports) on the others.
        A request without one (a bare ``GET /health``, a signed URL, a wrong token) wakes
        nothing and sees the paused sandbox as any other: not running. (The SDKs send the
        token with every envd call, ``is_running()`` included, and so wake it.)"""
        asleep = self._service.wakeable(sandbox_id)
        if asleep is None:
            return None
        if port == ENVD_PORT:
            allowed = tokens_equal(headers.get("x-access-token"), asleep.access_token)
        else:
            allowed = _may_use_port(headers, asleep)
        if not allowed:
            return None
        return await self._service.wake(sandbox_id)


async def _refuse_upgrade(scope: Scope, send: Send, headers: dict[str, str], plane: str) -> None:
    """WebSocket upgrades to the control plane or envd: neither serves one (PTY and process
    output are Connect-RPC streams over plain HTTP), so every upgrade there is refused.

    SECURITY (AUTH-05): one from a foreign ``Origin`` is refused first and as such (403), so a
    future WebSocket route here cannot be reached cross-site from a browser; API credentials
    are headers only (never cookies), so a hostile page has no ambient authority to borrow.
    The console's terminal, the one upgrade passed on (``CONSOLE_WEBSOCKETS``), does use a
    cookie (SameSite=Strict), which is why it needs this server's Origin.
    """
    origin = _foreign_origin(headers)
    if origin is not None:
        message = (
            f"cross-site WebSocket refused: Origin {origin[:200]!r} is not this server; "
            "connect from a program, not from a web page on another site"
        )
        await send_json(scope, send, 403, {"code": 403, "message": message})
        return
    where = "envd (port 49983)" if plane == "envd" else "the control plane"
    message = (
        f"{where} serves no WebSocket at {scope['path'][:200]}: processes, PTYs and file "
        "watches are Connect-RPC streams over HTTP; WebSockets reach services inside a "
        "sandbox through <port>-<id>.<domain> or the E2b-Sandbox-Id/-Port headers"
    )
    await send_json(scope, send, 404, {"code": 404, "message": message})


def _foreign_origin(headers: dict[str, str]) -> str | None:
    """The ``Origin`` header if it names a site other than the request's ``Host``."""
    origin = headers.get("origin")
    if origin is None:
        return None
    host = headers.get("host", "").lower()
    if origin.lower() in ("", "null") or urlsplit(origin).netloc.lower() != host:
        return origin
    return None


def parse_port(text: str) -> int | None:
    """``text`` as a port if it is a canonical decimal in 1..65535, else None.

    Canonical: ASCII digits only, no sign, no spaces, no leading zero; so one port has one
    spelling and ``int()``'s leniency (``" 80"``, ``"+80"``, ``"0080"``, ``"8_0"``, non-ASCII
    digits, 5000-digit strings) never decides where a request goes.
    """
    if not _PORT.fullmatch(text):
        return None
    port = int(text)
    return port if port <= 65535 else None


def _single_headers(scope: Scope) -> dict[str, str]:
    """The request headers by lower-case name; raises ``InvalidRequest`` if a routing or
    credential header appears twice."""
    headers: dict[str, str] = {}
    for raw_name, raw_value in scope["headers"]:
        name = raw_name.decode("latin-1").lower()
        if name in headers and raw_name.lower() in _SINGLE:
            raise InvalidRequest(f"header {name} is given more than once: send it once")
        headers[name] = raw_value.decode("latin-1")
    return headers


def _target(headers: dict[str, str]) -> tuple[int, str] | None:
    """(port, sandbox id), or None for the control plane; raises ``InvalidPort`` or
    ``InvalidRequest`` for a routing form that names no valid port or sandbox."""
    label = re.split(r"[.:]", headers.get("host", ""), maxsplit=1)[0]
    match = _HOST.fullmatch(label)
    if match:
        port = parse_port(match.group(1))
        if port is None:
            raise InvalidPort(
                f"Host {label[:80]!r}: the port before '-' must be 1..65535, written without "
                "sign or leading zeros"
            )
        return port, match.group(2)
    sandbox_id = headers.get("e2b-sandbox-id")
    raw_port = headers.get("e2b-sandbox-port")
    if sandbox_id is None and raw_port is None:
        return None
    if sandbox_id is None:
        raise InvalidRequest("Missing header: E2b-Sandbox-Id")
    if raw_port is None:
        raise InvalidRequest("Missing header: E2b-Sandbox-Port")
    port = parse_port(raw_port)
    if port is None:
        raise InvalidPort(
            "Invalid header: E2b-Sandbox-Port must be a port number 1..65535, written without "
            "sign, spaces or leading zeros"
        )
    return port, sandbox_id


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
