"""The MCP server over streamable HTTP, served by ``sandgate serve`` at ``/v1/mcp``.

Trust: nothing from the client is believed until its API key is checked. Every HTTP request
(POST, the GET event stream, DELETE) must carry a key, as ``X-API-Key`` like the rest of the
API or as ``Authorization: Bearer <key>`` (what MCP hosts send for a configured token); a
missing, unknown or revoked key answers 401 JSON before the MCP SDK sees the request. The
caller acts as its key's team, and as the agent named by ``?agent=ID`` (a declared agent) if
given, so gateway tools keep that agent's policy; audit records the subject ``mcp-<key id>``.

Not enforced here: which agents a key may act as (any key may name any declared agent, as
with ``POST /v1/agents/{id}/runs``); sandboxes created over MCP live until their timeout or
``sandbox_kill``, not until the MCP session ends.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any, Final

from starlette.datastructures import Headers, QueryParams
from starlette.requests import Request
from starlette.types import Receive, Scope, Send

from mcp.server.auth.middleware.bearer_auth import AuthenticatedUser
from mcp.server.auth.provider import AccessToken
from mcp.server.context import ServerRequestContext
from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
from sandgate.access import authenticate_api_key
from sandgate.api.errors import e2b_error_response
from sandgate.api.mcp.server import McpCaller, build_mcp_server
from sandgate.errors import SandgateError, Unauthenticated
from sandgate.sandboxes import SandboxService
from sandgate.store import Store
from sandgate.tools import Gateway

__all__ = ["MCP_PATH", "McpHttp"]

MCP_PATH: Final = "/v1/mcp"
_CALLER: Final = "sandgate.mcp.caller"


class McpHttp:
    """An ASGI app: authenticates each request, then hands it to the SDK's session manager.

    ``run()`` must be entered once, in the server's lifespan, before any request arrives.
    """

    def __init__(
        self,
        sandboxes: SandboxService,
        gateway: Gateway,
        store: Store,
        check_agent: Callable[[str], object],
    ) -> None:
        """``check_agent(id)`` raises ``NotFound`` for an agent that is not declared."""
        self._store = store
        self._check_agent = check_agent
        self._sessions = StreamableHTTPSessionManager(
            build_mcp_server(sandboxes, gateway, caller_of_request)
        )

    @asynccontextmanager
    async def run(self) -> AsyncIterator[None]:
        """Runs the session manager; leaving it ends every open MCP session."""
        async with self._sessions.run():
            yield

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            caller = self._caller(scope)
        except SandgateError as exc:
            await e2b_error_response(exc)(scope, receive, send)
            return
        # SECURITY: only this line sets the caller, after the key check; ASGI scope keys come
        # from the server, never from the client, so handlers can trust caller_of_request().
        scope[_CALLER] = caller
        # SECURITY: the SDK binds each stateful session to the credential that opened it: a
        # session id presented with another key answers 404, as if it did not exist.
        scope["user"] = AuthenticatedUser(
            AccessToken(token="", client_id=caller.principal.api_key_id, scopes=[])
        )
        await self._sessions.handle_request(scope, receive, send)

    def _caller(self, scope: Scope) -> McpCaller:
        headers = Headers(scope=scope)
        presented = headers.get("x-api-key")
        if presented is None:
            scheme, _, token = headers.get("authorization", "").partition(" ")
            presented = token if scheme.lower() == "bearer" and token else None
        principal = authenticate_api_key(self._store, presented)
        agent = QueryParams(scope.get("query_string", b"")).get("agent") or None
        if agent is not None:
            self._check_agent(agent)
        return McpCaller(principal, agent)


def caller_of_request(ctx: ServerRequestContext[Any, Any]) -> McpCaller:
    """The caller ``McpHttp`` authenticated for the HTTP request behind ``ctx``."""
    request = ctx.request
    caller = request.scope.get(_CALLER) if isinstance(request, Request) else None
    if not isinstance(caller, McpCaller):
        raise Unauthenticated("MCP request without an authenticated HTTP request")
    return caller
