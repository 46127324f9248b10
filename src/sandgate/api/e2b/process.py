"""envd's ``process.Process`` service, translated onto the guest protocol.

Requests arrive in proto3 JSON: field names in lowerCamelCase or snake_case, enums as names or
numbers, bytes as base64. Responses use lowerCamelCase, enum names and base64, omit default
values, and keep oneof members even when empty (``"start": {}``), as the clients check them.
"""

from __future__ import annotations

import base64
import binascii
import math
import re
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

from starlette.requests import Request
from starlette.responses import Response

from sandgate.api.e2b import messages
from sandgate.api.e2b.connect import (
    RpcError,
    read_stream_messages,
    read_stream_request,
    stream_response,
    with_keepalive,
)
from sandgate.api.e2b.guest_rpc import guest_of, stream_failure, unary_call
from sandgate.api.e2b.users import request_user
from sandgate.guest.client import (
    Ended,
    GuestError,
    Output,
    ProcessStream,
    Started,
)

__all__ = ["PROCESS_METHODS", "keepalive_interval", "timeout_ms"]

_SIGNALS = {"SIGNAL_SIGKILL": 9, "SIGNAL_SIGTERM": 15}
_DEFAULT_KEEPALIVE_S = 90.0
_TIMEOUT = re.compile(r"^[0-9]{1,10}$")
_KEEPALIVE: dict[str, Any] = {"event": {"keepalive": {}}}


def _selector(message: dict[str, Any] | None, where: str = "") -> dict[str, Any]:
    """A ``ProcessSelector``: exactly one of ``pid`` and ``tag`` (a oneof)."""
    process = messages.message(message or {}, "process", where=where)
    if process is None:
        raise RpcError("invalid_argument", f"{where}process selector is required")
    pid = messages.integer(process, "pid", where=f"{where}process.")
    tag = messages.string(process, "tag", where=f"{where}process.")
    if pid is not None and tag is not None:
        raise RpcError("invalid_argument", f"{where}process selector takes pid or tag, not both")
    if pid is not None:
        return {"pid": pid}
    if tag is not None:
        return {"tag": tag}
    raise RpcError("invalid_argument", f"{where}process selector needs pid or tag")


def _pty_size(pty: dict[str, Any], where: str) -> tuple[int, int]:
    size = messages.message(pty, "size", where=where) or {}
    bounds = (1, 65535)  # struct winsize holds unsigned shorts
    cols = messages.integer(size, "cols", bounds=bounds, where=f"{where}size.")
    rows = messages.integer(size, "rows", bounds=bounds, where=f"{where}size.")
    return (80 if cols is None else cols), (24 if rows is None else rows)


def _input(data: dict[str, Any] | None, where: str) -> tuple[bytes, bool]:
    """A ``ProcessInput`` oneof: ``stdin`` or ``pty`` bytes."""
    pty = (data or {}).get("pty")
    stdin = (data or {}).get("stdin")
    if pty is not None and stdin is not None:
        raise RpcError("invalid_argument", f"{where}input takes stdin or pty, not both")
    if pty is not None:
        return _b64(pty, f"{where}input.pty"), True
    return _b64("" if stdin is None else stdin, f"{where}input.stdin"), False


def _b64(value: Any, name: str) -> bytes:
    if not isinstance(value, str):
        raise RpcError("invalid_argument", f"{name} must be base64 bytes")
    try:
        return base64.b64decode(value, validate=True)
    except (binascii.Error, ValueError):
        raise RpcError("invalid_argument", f"{name} is not valid base64") from None


def _event(item: Started | Output | Ended) -> dict[str, Any]:
    if isinstance(item, Started):
        return {"event": {"start": {"pid": item.pid}}}
    if isinstance(item, Output):
        return {"event": {"data": {item.stream: base64.b64encode(item.data).decode()}}}
    end: dict[str, Any] = {"exited": item.exited, "status": item.status}
    if item.exit_code:
        end["exitCode"] = item.exit_code
    if item.error:
        end["error"] = item.error
    return {"event": {"end": end}}


async def _events(request: Request, stream: ProcessStream) -> AsyncIterator[dict[str, Any]]:
    """Translates guest events; a timed-out process ends the stream with deadline_exceeded;
    a sandbox killed meanwhile drops the connection (``stream_failure``)."""
    try:
        async for item in stream:
            if isinstance(item, Ended) and item.timed_out:
                raise RpcError("deadline_exceeded", "command timed out: the process was killed")
            yield _event(item)
    except GuestError as exc:
        raise await stream_failure(request, exc) from None
    finally:
        await stream.aclose()


def keepalive_interval(request: Request) -> float:
    """The client's ``Keepalive-Ping-Interval`` in seconds (at least 1); a value that is not
    a finite number means the default, as the header is advisory."""
    raw = request.headers.get("keepalive-ping-interval")
    try:
        value = float(raw) if raw else _DEFAULT_KEEPALIVE_S
    except ValueError:
        return _DEFAULT_KEEPALIVE_S
    return max(1.0, value) if math.isfinite(value) else _DEFAULT_KEEPALIVE_S


def timeout_ms(request: Request) -> int:
    """The request's ``connect-timeout-ms`` (0 = none): 1 to 10 ASCII digits, as the Connect
    protocol defines it; anything else (a sign, spaces, ``1e3``) is ``invalid_argument``."""
    raw = request.headers.get("connect-timeout-ms")
    if not raw:
        return 0
    if not _TIMEOUT.fullmatch(raw):
        raise RpcError(
            "invalid_argument", "connect-timeout-ms must be a non-negative integer (1-10 digits)"
        )
    return int(raw)


async def _stream_call(
    request: Request,
    opener: Callable[[dict[str, Any]], Awaitable[ProcessStream]],
    *,
    bounded: bool,
) -> Response:
    """``bounded``: ``connect-timeout-ms`` bounds the stream itself (Connect), rather than the
    process's life (Start, where the guest enforces it)."""
    message = await read_stream_request(request)
    try:
        stream = await opener(message)
    except GuestError as exc:
        raise RpcError(exc.connect, exc.message) from None
    return stream_response(
        with_keepalive(
            _events(request, stream),
            keepalive_interval(request),
            _KEEPALIVE,
            deadline_ms=timeout_ms(request) if bounded else 0,
        )
    )


async def start(request: Request) -> Response:
    async def opener(message: dict[str, Any]) -> ProcessStream:
        config = messages.message(message, "process")
        cmd = messages.string(config or {}, "cmd", where="process.")
        if config is None or cmd is None:
            raise RpcError("invalid_argument", "process.cmd is required")
        args = messages.string_list(config, "args", where="process.")
        envs = messages.string_map(config, "envs", where="process.")
        cwd = messages.string(config, "cwd", where="process.")
        pty = messages.message(message, "pty")
        size = None if pty is None else _pty_size(pty, "pty.")
        tag = messages.string(message, "tag")
        stdin = messages.boolean(message, "stdin", default=True)
        user = request_user(request)
        stream = await guest_of(request).spawn(
            cmd=cmd,
            args=args,
            envs=envs,
            cwd=cwd or None,
            user=user,
            tag=tag,
            stdin=stdin,
            pty=size,
            timeout_ms=timeout_ms(request),
        )
        sandboxes = request.scope.get("sandgate.sandboxes")
        if sandboxes is not None:
            sandboxes.record_command(
                request.scope["sandgate.route"].sandbox_id,
                cmd=cmd,
                args=args,
                user=user,
                pid=stream.pid,
            )
        return stream

    return await _stream_call(request, opener, bounded=False)


async def connect(request: Request) -> Response:
    async def opener(message: dict[str, Any]) -> ProcessStream:
        return await guest_of(request).connect_process(**_selector(message))

    return await _stream_call(request, opener, bounded=True)


async def list_processes(request: Request) -> Response:
    async def call(_: dict[str, Any]) -> dict[str, Any]:
        processes = []
        for info in await guest_of(request).list_processes():
            config: dict[str, Any] = {"cmd": info.cmd, "args": info.args}
            if info.envs:
                config["envs"] = info.envs
            if info.cwd:
                config["cwd"] = info.cwd
            entry: dict[str, Any] = {"config": config, "pid": info.pid}
            if info.tag:
                entry["tag"] = info.tag
            processes.append(entry)
        return {"processes": processes}

    return await unary_call(request, call)


async def send_signal(request: Request) -> Response:
    async def call(message: dict[str, Any]) -> None:
        signal = messages.enum(message, "signal", _SIGNALS)
        if signal is None:
            raise RpcError(
                "invalid_argument", "signal is required (SIGNAL_SIGKILL, SIGNAL_SIGTERM)"
            )
        await guest_of(request).signal(signal, **_selector(message))

    return await unary_call(request, call)


async def send_input(request: Request) -> Response:
    async def call(message: dict[str, Any]) -> None:
        payload, pty = _input(messages.message(message, "input"), "")
        await guest_of(request).send_input(payload, **_selector(message), pty=pty)

    return await unary_call(request, call)


async def close_stdin(request: Request) -> Response:
    async def call(message: dict[str, Any]) -> None:
        await guest_of(request).close_stdin(**_selector(message))

    return await unary_call(request, call)


async def update(request: Request) -> Response:
    async def call(message: dict[str, Any]) -> None:
        selector = _selector(message)
        pty = messages.message(message, "pty")
        if pty is None:
            return
        cols, rows = _pty_size(pty, "pty.")
        await guest_of(request).resize(cols, rows, **selector)

    return await unary_call(request, call)


async def stream_input(request: Request) -> Response:
    """Client streaming: a ``start`` naming the process, then ``data`` events of input.

    The whole request stream is consumed before the response starts (Connect answers a client
    stream once it ends). Reading it while a streaming response runs would race the response's
    disconnect listener for the request's messages, which drops the ones it wins: input lost,
    or a request that never ends. An error ends the call at once, as an end-of-stream error.
    """
    selector: dict[str, Any] | None = None
    try:
        async for message in read_stream_messages(request):
            start = messages.message(message, "start")
            data = messages.message(message, "data")
            if start is not None and data is not None:
                raise RpcError("invalid_argument", "an event is start or data, not both")
            if start is not None:
                selector = _selector(start, "start.")
            elif data is not None:
                if selector is None:
                    raise RpcError("failed_precondition", "send a start event first")
                payload, pty = _input(messages.message(data, "input", where="data."), "data.")
                await guest_of(request).send_input(payload, **selector, pty=pty)
    except GuestError as exc:
        raise RpcError(exc.connect, exc.message) from None

    async def result() -> AsyncIterator[dict[str, Any]]:
        yield {}

    return stream_response(result())


PROCESS_METHODS: dict[str, Callable[[Request], Awaitable[Response]]] = {
    "Start": start,
    "Connect": connect,
    "List": list_processes,
    "SendSignal": send_signal,
    "SendInput": send_input,
    "CloseStdin": close_stdin,
    "Update": update,
    "StreamInput": stream_input,
}
