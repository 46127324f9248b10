"""The HTTP routes of the code-interpreter server and its entry point (``main``)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import socket
import sys
from typing import Any

from . import _http
from ._contexts import Context, Contexts, Execution, UnknownContext
from ._events import Event
from ._kernel import KernelStartError
from ._languages import UnknownLanguage, language_named
from ._options import context_cwd, context_user
from ._prestart import Prestarted, kernel_env, state_path
from ._state import StateFile

__all__ = ["KEEPALIVE_S", "Server", "main"]

KEEPALIVE_S = 5.0
"""Seconds of silence before a ``keepalive`` line; keep ≥ 4 (contract §4.2)."""
DEFAULT_PORT = 49999
DEFAULT_MAX_OUTPUT = 16 * 1024 * 1024
_LINE_END = b"\n"
_BACKSTOP_SLACK = 1024 * 1024


class Server:
    """Routes requests to ``Contexts``. One request per connection."""

    def __init__(self, contexts: Contexts, *, max_output: int = DEFAULT_MAX_OUTPUT) -> None:
        self.contexts = contexts
        self._max_output = max_output
        self._tasks: set[asyncio.Task[None]] = set()

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        """Serves one connection: one request, one response, then close."""
        try:
            request = await _http.read_request(reader)
            if request is not None:
                await self._route(request, reader, writer)
        except _http.BadRequest as exc:
            await _http.respond(writer, exc.status, str(exc), text=True)
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        finally:
            writer.close()
            with contextlib.suppress(ConnectionError):
                await writer.wait_closed()

    async def _route(
        self, request: _http.Request, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        method, parts = request.method, [p for p in request.path.split("/") if p]
        if parts == ["health"] and method == "GET":
            await _http.respond(writer, 200, "OK")
        elif parts == ["execute"] and method == "POST":
            await self._execute(request.json(), reader, writer)
        elif parts == ["contexts"] and method == "GET":
            await _http.respond(writer, 200, [c.as_json() for c in self.contexts])
        elif parts == ["contexts"] and method == "POST":
            await self._create_context(request.json(), writer)
        elif len(parts) == 3 and parts[0] == "contexts" and parts[2] == "restart":
            await self._restart_context(parts[1], writer)
        elif len(parts) == 2 and parts[0] == "contexts" and method == "DELETE":
            await self._delete_context(parts[1], writer)
        else:
            await _http.respond(writer, 404, f"no route for {method} {request.path}", text=True)

    async def _create_context(self, body: dict[str, Any], writer: asyncio.StreamWriter) -> None:
        try:
            language = language_named(_optional_str(body, "language"))
            user = context_user(_optional_str(body, "user"))
        except (UnknownLanguage, ValueError) as exc:
            await _http.respond(writer, 400, str(exc), text=True)
            return
        cwd = context_cwd(_optional_str(body, "cwd"), user)
        context = self.contexts.create(language, cwd, user=user)
        try:
            await context.start()
        except KernelStartError as exc:
            await self.contexts.remove(context.id)
            await _http.respond(writer, 500, str(exc), text=True)
            return
        await _http.respond(writer, 200, context.as_json())

    async def _restart_context(self, context_id: str, writer: asyncio.StreamWriter) -> None:
        try:
            await self.contexts.get(context_id).restart()
        except UnknownContext:
            await _http.respond(writer, 404, f"context {context_id} not found", text=True)
        except KernelStartError as exc:
            await _http.respond(writer, 500, str(exc), text=True)
        else:
            await _http.respond(writer, 200, None)

    async def _delete_context(self, context_id: str, writer: asyncio.StreamWriter) -> None:
        try:
            await self.contexts.remove(context_id)
        except UnknownContext:
            await _http.respond(writer, 404, f"context {context_id} not found", text=True)
        else:
            await _http.respond(writer, 200, None)

    async def _execute(
        self, body: dict[str, Any], reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        code = body.get("code")
        if not isinstance(code, str):
            raise _http.BadRequest("code must be a string")
        context_id = _optional_str(body, "context_id")
        language = _optional_str(body, "language")
        env_vars = body.get("env_vars") or {}
        if not isinstance(env_vars, dict) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in env_vars.items()
        ):
            raise _http.BadRequest("env_vars must map strings to strings")
        if context_id and language:
            raise _http.BadRequest("give context_id or language, not both")
        try:
            context = self.contexts.get(context_id) if context_id else None
            context = context or self.contexts.default(language)
            if env_vars:
                context.language.set_env(env_vars)
        except UnknownContext:
            await _http.respond(writer, 404, f"context {context_id} not found", text=True)
            return
        except (UnknownLanguage, ValueError) as exc:
            raise _http.BadRequest(str(exc)) from None
        await self._stream(context, code, env_vars, reader, writer)

    async def _stream(
        self,
        context: Context,
        code: str,
        env_vars: dict[str, str],
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
    ) -> None:
        events: asyncio.Queue[Event | None] = asyncio.Queue()
        execution = Execution(events.put_nowait, self._max_output)

        async def run() -> None:
            try:
                await context.execute(code, env_vars, execution)
            finally:
                events.put_nowait(None)

        self._keep(asyncio.create_task(run()))
        gone = asyncio.create_task(_peer_closed(reader))
        next_event: asyncio.Task[Event | None] | None = None
        try:
            await _http.start_stream(writer)
            while True:
                next_event = next_event or asyncio.create_task(events.get())
                done, _ = await asyncio.wait(
                    {next_event, gone}, timeout=KEEPALIVE_S, return_when=asyncio.FIRST_COMPLETED
                )
                if gone in done:
                    execution.cancel()
                    return
                if not done:
                    await _write_event(writer, {"type": "keepalive"})
                    continue
                event, next_event = next_event.result(), None
                if event is None:
                    break
                await _write_event(writer, event)
            await _write_event(writer, {"type": "end_of_execution"})
            await _http.end_stream(writer)
        except ConnectionError:
            execution.cancel()
        finally:
            gone.cancel()
            if next_event is not None:
                next_event.cancel()

    def _keep(self, task: asyncio.Task[None]) -> None:
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)


async def _peer_closed(reader: asyncio.StreamReader) -> None:
    """Returns when the caller closes its side (the gateway closes the tunnel when the SDK
    client disconnects); data after the request body is ignored."""
    with contextlib.suppress(ConnectionError):
        while await reader.read(4096):
            pass


async def _write_event(writer: asyncio.StreamWriter, event: Event) -> None:
    await _http.write_chunk(writer, json.dumps(event).encode() + _LINE_END)


def _optional_str(body: dict[str, Any], key: str) -> str | None:
    value = body.get(key)
    if value is None:
        return None
    if not isinstance(value, str):
        raise _http.BadRequest(f"{key} must be a string")
    return value


async def serve(port: int, max_output: int, prestarted: Prestarted | None = None) -> None:
    """Brings back what a previous server left (``Contexts.restore``), starts the default
    python kernel (taking ``prestarted`` as its process if it fits), then serves until
    cancelled."""
    # The server's own limit is a backstop for kernels that do not bound themselves
    # (javascript, bash) and for results; python's writers stop at ``max_output``.
    contexts = Contexts(kernel_env(), max_output, StateFile(state_path()))
    for line in contexts.restore():
        print(f"sandgate-interpreter: {line}", file=sys.stderr)
    python = contexts.default("python")
    contexts.default("javascript")
    try:
        await python.start(prestarted)
    except KernelStartError as exc:
        print(f"sandgate-interpreter: {exc}; will retry on first use", file=sys.stderr)
    server = Server(contexts, max_output=max_output + _BACKSTOP_SLACK)
    listener = await _listen(server, port)
    print(f"sandgate-interpreter: listening on 127.0.0.1:{port}", file=sys.stderr, flush=True)
    try:
        async with listener:
            await listener.serve_forever()
    finally:
        await contexts.shutdown()


async def _listen(server: Server, port: int) -> asyncio.Server:
    """Listens on the socket the supervisor handed over (``SANDGATE_INTERPRETER_LISTEN_FD``,
    already bound, perhaps already listening with requests waiting), else binds its own."""
    inherited = os.environ.pop("SANDGATE_INTERPRETER_LISTEN_FD", None)
    if inherited:
        sock = socket.socket(fileno=int(inherited))
        return await asyncio.start_server(server.handle, sock=sock)
    return await asyncio.start_server(server.handle, "127.0.0.1", port)


def main(prestarted: Prestarted | None = None) -> None:
    port = int(os.environ.get("SANDGATE_INTERPRETER_PORT", DEFAULT_PORT))
    max_output = int(os.environ.get("SANDGATE_INTERPRETER_MAX_OUTPUT", DEFAULT_MAX_OUTPUT))
    asyncio.run(_serve_until_terminated(port, max_output, prestarted))


async def _serve_until_terminated(
    port: int, max_output: int, prestarted: Prestarted | None
) -> None:
    """``serve``, stopped cleanly (kernels shut down, state saved) by SIGTERM."""
    task = asyncio.current_task()
    if task is not None:
        asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, task.cancel)
    with contextlib.suppress(asyncio.CancelledError):
        await serve(port, max_output, prestarted)
