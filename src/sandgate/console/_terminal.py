"""The console's live terminal: a sandbox's PTY bridged to a browser over a WebSocket.

Trust: the browser is trusted as far as its console session's key. What is enforced here:

* SECURITY (AUTH-05): the upgrade must carry an ``Origin`` naming this server (the router
  already refuses a foreign one; a missing one is refused here, so only a page of this
  console opens a terminal), and a live session cookie. Browsers send the SameSite=Strict
  cookie only with same-site upgrades; the Origin check is what holds against a page on a
  sibling host.
* A read-only key gets no terminal (typing is an action).
* The sandbox is looked up with the session's principal, as the API does: another team's
  sandbox, or an unknown one, is closed with 4404 like any sandbox that does not exist.

The shell is started the way envd's ``process.Start`` starts a PTY (``guest.spawn`` with a
size and stdin), so the guest runs it as the sandbox's default user; it is killed when the
socket closes. Wire format: the browser sends JSON text frames ``{"type": "input", "data":
"..."}`` and ``{"type": "resize", "cols": N, "rows": N}``; the server sends the PTY's bytes as
binary frames, and closes with 1000 when the shell exits.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from typing import Any, Final
from urllib.parse import urlsplit

import structlog
from starlette.websockets import WebSocket, WebSocketDisconnect

from sandgate._tasks import cancel_and_wait
from sandgate.console._sessions import COOKIE, SessionTable
from sandgate.errors import SandgateError
from sandgate.guest.client import Ended, GuestError, Output, ProcessStream
from sandgate.sandboxes import SandboxService

__all__ = ["Terminal"]

log = structlog.get_logger("sandgate.console")

_SHELL: Final = ("/bin/bash", ["-i", "-l"])
_SIZE_BOUNDS: Final = (1, 1000)
#: Close codes (4000-4999 are the application's): the browser shows the reason.
_UNAUTHORISED: Final = 4401
_FORBIDDEN: Final = 4403
_NOT_FOUND: Final = 4404
_FAILED: Final = 4500


def _size(value: Any, default: int) -> int:
    if isinstance(value, str) and value.isdigit():
        value = int(value)
    if isinstance(value, int) and not isinstance(value, bool):
        return min(max(value, _SIZE_BOUNDS[0]), _SIZE_BOUNDS[1])
    return default


class Terminal:
    """The WebSocket endpoint ``/ui/sandboxes/{id}/terminal``."""

    def __init__(self, sessions: SessionTable, sandboxes: SandboxService) -> None:
        self._sessions = sessions
        self._sandboxes = sandboxes

    async def __call__(self, websocket: WebSocket) -> None:
        origin = websocket.headers.get("origin")
        host = websocket.headers.get("host", "").lower()
        if origin is None or urlsplit(origin).netloc.lower() != host:
            await websocket.close(_FORBIDDEN, "terminal refused: open it from the console page")
            return
        session = self._sessions.get(websocket.cookies.get(COOKIE))
        if session is None:
            await websocket.close(_UNAUTHORISED, "sign in to the console first")
            return
        if session.read_only:
            await websocket.close(_FORBIDDEN, "this API key is read-only: it opens no terminal")
            return
        sandbox_id = websocket.path_params["sandbox_id"]
        try:
            row = self._sandboxes.get(session.principal, sandbox_id)
        except SandgateError as exc:
            await websocket.close(_NOT_FOUND, exc.message[:120])
            return
        route = self._sandboxes.route(row.id) if row.state == "running" else None
        if route is None:
            await websocket.close(_NOT_FOUND, f"sandbox {row.id} is {row.state}: resume it first")
            return
        cols = _size(websocket.query_params.get("cols"), 80)
        rows = _size(websocket.query_params.get("rows"), 24)
        try:
            stream = await route.guest.spawn(
                _SHELL[0],
                _SHELL[1],
                envs={"TERM": "xterm-256color"},
                stdin=True,
                pty=(cols, rows),
            )
        except GuestError as exc:
            await websocket.close(_FAILED, f"the shell did not start: {exc.message}"[:120])
            return
        self._sandboxes.record_command(
            row.id, cmd=_SHELL[0], args=_SHELL[1], user=None, pid=stream.pid
        )
        log.info("console.terminal", sandbox=row.id, key=session.principal.api_key_id)
        await websocket.accept()
        await self._bridge(websocket, route.guest, stream)

    async def _bridge(self, websocket: WebSocket, guest: Any, stream: ProcessStream) -> None:
        """Copies PTY output to the socket and the socket's input to the PTY until either
        ends; then kills the shell (its whole group) and closes both."""

        async def output() -> None:
            async for item in stream:
                if isinstance(item, Output):
                    await websocket.send_bytes(item.data)
                elif isinstance(item, Ended):
                    return

        async def typing() -> None:
            while True:
                message = json.loads(await websocket.receive_text())
                if not isinstance(message, dict):
                    continue
                if message.get("type") == "input" and isinstance(message.get("data"), str):
                    await guest.send_input(message["data"].encode(), pid=stream.pid, pty=True)
                elif message.get("type") == "resize":
                    cols, rows = _size(message.get("cols"), 80), _size(message.get("rows"), 24)
                    await guest.resize(cols, rows, pid=stream.pid)

        reader = asyncio.create_task(output())
        writer = asyncio.create_task(typing())
        try:
            await asyncio.wait({reader, writer}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for task in (reader, writer):
                task.cancel()
            for task in (reader, writer):
                await cancel_and_wait(
                    task, absorb=(WebSocketDisconnect, GuestError, ValueError, RuntimeError)
                )
            with contextlib.suppress(GuestError):
                await guest.signal(9, pid=stream.pid)
            await stream.aclose()
            with contextlib.suppress(RuntimeError):
                await websocket.close(1000)
