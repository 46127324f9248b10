"""One long-lived, health-checked client session per configured MCP server.

A supervisor task owns the connection (``async with Client(...)``, entered and left in that
task, as the SDK requires): it connects (starting the server process for ``stdio``), lists the
tools, then checks the session every ``HEALTH_INTERVAL_S`` by listing them again. A failed
check, or a call that finds the connection closed (the server crashed or hung up), ends the
session; the supervisor connects again at once, then with growing pauses (up to
``MAX_BACKOFF_S``) while it keeps failing. Calls are multiplexed on the one session (the
protocol matches answers to requests by id), so concurrent calls do not wait for each other.

``call`` is bounded as a whole by the tool's ``timeout_s``: waiting for a (re)connection, the
request and the answer; a call that runs out of time fails with ``tool_timeout`` exactly then
(the request is cancelled; the session stays up for other calls).

Trust: the server is operator-configured code. A stdio server runs in a working directory of
its own (``$SANDGATE_HOME/tools/work/mcp-<name>``, mode 0700) with the tool's ``env`` and its
secrets on top of the SDK's minimal default environment; its output is treated like any
tool's (redacted, truncated) before it reaches a sandbox.
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import mcp_types
import structlog
from mcp import Client
from mcp.client.stdio import StdioServerParameters
from mcp.shared.exceptions import MCPError

from sandgate._tasks import cancel_and_wait
from sandgate.config import McpTool
from sandgate.errors import ToolFailed, ToolTimeout

__all__ = ["McpSession", "SessionState"]

log = structlog.get_logger("sandgate.tools")

HEALTH_INTERVAL_S = 30.0
HEALTH_TIMEOUT_S = 10.0
MAX_BACKOFF_S = 30.0


class SessionState(enum.StrEnum):
    STARTING = "starting"  #: connecting (first time)
    UP = "up"  #: connected and answering
    RESTARTING = "restarting"  #: the last session failed; connecting again
    CLOSED = "closed"  #: the gateway is stopping


@dataclass(frozen=True)
class SessionHealth:
    state: SessionState
    restarts: int
    last_error: str | None

    def as_dict(self) -> dict[str, Any]:
        return {"state": self.state.value, "restarts": self.restarts, "error": self.last_error}


class McpSession:
    def __init__(
        self,
        server: McpTool,
        env: dict[str, str],
        workdir: Path,
        on_tools: Callable[[list[mcp_types.Tool]], None],
    ) -> None:
        """``env`` (the tool's env and secrets) is given to a stdio server at each start;
        ``on_tools`` receives the server's tools at each (re)connection."""
        self._server = server
        self._env = env
        self._workdir = workdir
        self._on_tools = on_tools
        self._client: Client | None = None
        self._ready = asyncio.Event()
        self._broken = asyncio.Event()
        self._stop = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._state = SessionState.STARTING
        self._restarts = 0
        self._last_error: str | None = None

    @property
    def health(self) -> SessionHealth:
        return SessionHealth(self._state, self._restarts, self._last_error)

    async def start(self, wait_s: float) -> bool:
        """Starts the supervisor; returns whether the session came up within ``wait_s``."""
        if self._task is None:
            self._task = asyncio.create_task(
                self._supervise(), name=f"mcp-session-{self._server.name}"
            )
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(wait_s):
                await self._ready.wait()
        return self._ready.is_set()

    async def close(self) -> None:
        """Ends the session (and a stdio server's process); idempotent."""
        self._state = SessionState.CLOSED
        self._stop.set()
        if self._task is not None:
            await cancel_and_wait(self._task, absorb=())
            self._task = None

    async def call(
        self, tool: str, remote: str, arguments: dict[str, Any], timeout_s: float
    ) -> mcp_types.CallToolResult:
        """Calls ``remote`` on the server; raises ``ToolTimeout`` after ``timeout_s`` in all
        (connecting included) and ``ToolFailed`` when the server cannot be reached."""
        started = time.monotonic()
        try:
            async with asyncio.timeout(timeout_s):
                while True:
                    await self._ready.wait()
                    client = self._client
                    if client is not None:
                        break
                return await client.call_tool(remote, arguments)
        except TimeoutError:
            state = self._state.value
            raise ToolTimeout(
                f"{tool}: the MCP server '{self._server.name}' did not answer within "
                f"{timeout_s:g}s (session {state}, {time.monotonic() - started:.1f}s spent)"
            ) from None
        except MCPError as exc:
            if exc.code == mcp_types.CONNECTION_CLOSED:
                self._fail(f"connection closed during a call ({exc.message})")
            raise ToolFailed(f"{tool}: MCP call failed: {exc.message}") from None
        except Exception as exc:  # a transport failure of the operator's server
            self._fail(f"call failed: {exc!r}")
            raise ToolFailed(f"{tool}: MCP call failed: {exc!r}") from exc

    def _fail(self, reason: str) -> None:
        self._last_error = reason[:300]
        self._ready.clear()
        self._broken.set()

    async def _supervise(self) -> None:
        backoff = 0.0
        while not self._stop.is_set():
            try:
                await self._session()
                backoff = 0.0  # a session that worked: the next failure retries at once
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # connecting or checking failed: try again, later
                self._last_error = f"{type(exc).__name__}: {exc}"[:300]
                log.warning(
                    "tools.mcp_session_failed",
                    server=self._server.name,
                    error=self._last_error,
                    retry_in_s=backoff,
                )
            self._client = None
            self._ready.clear()
            if self._stop.is_set():
                return
            self._restarts += 1
            self._state = SessionState.RESTARTING
            await asyncio.sleep(backoff)
            backoff = min(MAX_BACKOFF_S, max(0.5, backoff * 2))

    async def _session(self) -> None:
        """One connection, from connect to its failure."""
        async with Client(self._target(), cache=None) as client:
            async with asyncio.timeout(HEALTH_TIMEOUT_S):
                listed = await client.list_tools()
            self._on_tools(list(listed.tools))
            self._client = client
            self._broken.clear()
            self._state = SessionState.UP
            self._last_error = None
            self._ready.set()
            log.info("tools.mcp_session_up", server=self._server.name, restarts=self._restarts)
            while True:
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(HEALTH_INTERVAL_S):
                        await self._broken.wait()
                if self._broken.is_set():
                    raise ConnectionError(self._last_error or "the session broke")
                async with asyncio.timeout(HEALTH_TIMEOUT_S):
                    await client.list_tools()

    def _target(self) -> StdioServerParameters | str:
        if self._server.transport == "http":
            return self._server.url
        self._workdir.mkdir(parents=True, exist_ok=True, mode=0o700)
        return StdioServerParameters(
            command=self._server.command[0],
            args=self._server.command[1:],
            env=self._env,
            cwd=self._workdir,
        )
