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

The SDK (about a second of imports) is loaded, and its session manager started, on the first
MCP request rather than at start: most servers never see one. The key check comes first, so
an unauthenticated request never loads it.
"""

from __future__ import annotations

import asyncio
import importlib
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Final

from starlette.datastructures import Headers, QueryParams
from starlette.types import Receive, Scope, Send

from sandgate.access import authenticate_api_key
from sandgate.api.errors import e2b_error_response
from sandgate.api.mcp.caller import McpCaller
from sandgate.errors import SandgateError
from sandgate.sandboxes import SandboxService
from sandgate.store import Store
from sandgate.tools import Gateway

if TYPE_CHECKING:
    from mcp.server.streamable_http_manager import StreamableHTTPSessionManager

__all__ = ["MCP_PATH", "McpHttp"]

MCP_PATH: Final = "/v1/mcp"
#: The ASGI scope key under which ``McpHttp`` leaves the authenticated caller.
CALLER_SCOPE_KEY: Final = "sandgate.mcp.caller"


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
        self._sandboxes = sandboxes
        self._gateway = gateway
        self._store = store
        self._check_agent = check_agent
        self._sessions: StreamableHTTPSessionManager | None = None
        self._loading = asyncio.Lock()
        self._stopping = asyncio.Event()
        self._runner: asyncio.Task[None] | None = None

    @asynccontextmanager
    async def run(self) -> AsyncIterator[None]:
        """Serves MCP sessions while entered; leaving it ends every open MCP session."""
        try:
            yield
        finally:
            self._stopping.set()
            if self._runner is not None:
                await self._runner

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            caller = self._caller(scope)
        except SandgateError as exc:
            await e2b_error_response(exc)(scope, receive, send)
            return
        sessions = await self._started_sessions()
        from sandgate.api.mcp import _sessions

        # SECURITY: only this line sets the caller, after the key check; ASGI scope keys come
        # from the server, never from the client, so handlers can trust caller_of_request().
        scope[CALLER_SCOPE_KEY] = caller
        # SECURITY: the SDK binds each stateful session to the credential that opened it: a
        # session id presented with another key answers 404, as if it did not exist.
        scope["user"] = _sessions.authenticated_user(caller)
        await sessions.handle_request(scope, receive, send)

    async def _started_sessions(self) -> StreamableHTTPSessionManager:
        """The SDK's session manager, loaded (in a thread: the event loop keeps serving) and
        started in a task of its own on the first call."""
        async with self._loading:
            if self._sessions is None:
                module = await asyncio.to_thread(
                    importlib.import_module, "sandgate.api.mcp._sessions"
                )
                sessions: StreamableHTTPSessionManager = module.session_manager(
                    self._sandboxes, self._gateway
                )
                started: asyncio.Future[None] = asyncio.get_running_loop().create_future()
                self._runner = asyncio.create_task(
                    self._serve(sessions, started), name="mcp-sessions"
                )
                try:
                    await started
                except BaseException:
                    self._runner = None  # the next request tries again; this one fails
                    raise
                self._sessions = sessions
            return self._sessions

    async def _serve(
        self, sessions: StreamableHTTPSessionManager, started: asyncio.Future[None]
    ) -> None:
        """Runs the session manager (its task group lives in this task) until ``run`` ends."""
        try:
            async with sessions.run():
                started.set_result(None)
                await self._stopping.wait()
        except BaseException as exc:
            if not started.done():
                started.set_exception(exc)
            raise

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
