"""The MCP SDK's side of ``McpHttp``, imported on the first MCP request (see ``http``)."""

from __future__ import annotations

from typing import Any

from starlette.requests import Request

from mcp.server.auth.middleware.bearer_auth import AuthenticatedUser
from mcp.server.auth.provider import AccessToken
from mcp.server.context import ServerRequestContext
from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
from sandgate.api.mcp.caller import McpCaller
from sandgate.api.mcp.http import CALLER_SCOPE_KEY
from sandgate.api.mcp.server import build_mcp_server
from sandgate.errors import Unauthenticated
from sandgate.sandboxes import SandboxService
from sandgate.tools import Gateway

__all__ = ["authenticated_user", "caller_of_request", "session_manager"]


def session_manager(sandboxes: SandboxService, gateway: Gateway) -> StreamableHTTPSessionManager:
    """The SDK's session manager over our MCP server; ``run()`` it before any request."""
    return StreamableHTTPSessionManager(build_mcp_server(sandboxes, gateway, caller_of_request))


def authenticated_user(caller: McpCaller) -> AuthenticatedUser:
    """The SDK's user for a request, so it binds each session to the key that opened it."""
    return AuthenticatedUser(
        AccessToken(token="", client_id=caller.principal.api_key_id, scopes=[])
    )


def caller_of_request(ctx: ServerRequestContext[Any, Any]) -> McpCaller:
    """The caller ``McpHttp`` authenticated for the HTTP request behind ``ctx``."""
    request = ctx.request
    caller = request.scope.get(CALLER_SCOPE_KEY) if isinstance(request, Request) else None
    if not isinstance(caller, McpCaller):
        raise Unauthenticated("MCP request without an authenticated HTTP request")
    return caller
