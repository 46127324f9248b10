"""envd's ``process.Process`` service, translated onto the guest protocol.

Requests arrive in proto3 JSON: field names in lowerCamelCase or snake_case, enums as names or
numbers, bytes as base64. Responses use lowerCamelCase, enum names and base64, omit default
values, and keep oneof members even when empty (``"start": {}``), as the clients check them.
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

from starlette.requests import Request
from starlette.responses import Response

from sandgate.api.e2b.connect import (
    RpcError,
    read_stream_messages,
    read_stream_request,
    stream_response,
    with_keepalive,
)
from sandgate.api.e2b.guest_rpc import guest_of, unary_call
from sandgate.api.e2b.users import request_user
from sandgate.guest.client import (
    Ended,
    GuestError,
    Output,
    ProcessStream,
    Started,
)

__all__ = ["PROCESS_METHODS", "field"]

_SIGNALS = {"SIGNAL_SIGKILL": 9, "SIGNAL_SIGTERM": 15, "9": 9, "15": 15}
_DEFAULT_KEEPALIVE_S = 90.0
_KEEPALIVE: dict[str, Any] = {"event": {"keepalive": {}}}


def field(message: dict[str, Any], camel: str, snake: str | None = None) -> Any:
    """A field by its JSON name or its original proto name."""
    if camel in message:
        return message[camel]
    return message.get(snake) if snake else None


def _selector(message: dict[str, Any]) -> dict[str, Any]:
    process = message.get("process")
    if not isinstance(process, dict):
        raise RpcError("invalid_argument", "process selector is required")
    if "pid" in process:
        try:
            return {"pid": int(process["pid"])}
        except (TypeError, ValueError):
            raise RpcError("invalid_argument", "process.pid must be an integer") from None
    if isinstance(process.get("tag"), str):
        return {"tag": process["tag"]}
    raise RpcError("invalid_argument", "process selector needs pid or tag")


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


async def _events(stream: ProcessStream) -> AsyncIterator[dict[str, Any]]:
    """Translates guest events; a timed-out process ends the stream with deadline_exceeded."""
    try:
        async for item in stream:
            if isinstance(item, Ended) and item.timed_out:
                raise RpcError("deadline_exceeded", "command timed out: the process was killed")
            yield _event(item)
    except GuestError as exc:
        raise RpcError(exc.code, exc.message) from None
    finally:
        await stream.aclose()


def _keepalive_interval(request: Request) -> float:
    raw = request.headers.get("keepalive-ping-interval")
    try:
        return max(1.0, float(raw)) if raw else _DEFAULT_KEEPALIVE_S
    except ValueError:
        return _DEFAULT_KEEPALIVE_S


def timeout_ms(request: Request) -> int:
    """The request's ``connect-timeout-ms`` (0 = none); negative is invalid."""
    raw = request.headers.get("connect-timeout-ms")
    if not raw:
        return 0
    try:
        value = int(raw)
    except ValueError:
        raise RpcError("invalid_argument", "connect-timeout-ms must be an integer") from None
    if value < 0:
        raise RpcError("invalid_argument", "connect-timeout-ms must not be negative")
    return value


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
        raise RpcError(exc.code, exc.message) from None
    return stream_response(
        with_keepalive(
            _events(stream),
            _keepalive_interval(request),
            _KEEPALIVE,
            deadline_ms=timeout_ms(request) if bounded else 0,
        )
    )


async def start(request: Request) -> Response:
    async def opener(message: dict[str, Any]) -> ProcessStream:
        config = message.get("process")
        if not isinstance(config, dict) or not isinstance(config.get("cmd"), str):
            raise RpcError("invalid_argument", "process.cmd is required")
        args = config.get("args") or []
        envs = config.get("envs") or {}
        if not isinstance(args, list) or not all(isinstance(a, str) for a in args):
            raise RpcError("invalid_argument", "process.args must be a list of strings")
        if not isinstance(envs, dict) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in envs.items()
        ):
            raise RpcError("invalid_argument", "process.envs must map strings to strings")
        pty = message.get("pty")
        size = None
        if isinstance(pty, dict):
            raw_size = pty.get("size") or {}
            size = (int(raw_size.get("cols", 80)), int(raw_size.get("rows", 24)))
        stdin = message.get("stdin")
        user = request_user(request)
        stream = await guest_of(request).spawn(
            cmd=config["cmd"],
            args=args,
            envs=envs,
            cwd=config.get("cwd") or None,
            user=user,
            tag=message.get("tag"),
            stdin=True if stdin is None else bool(stdin),
            pty=size,
            timeout_ms=timeout_ms(request),
        )
        sandboxes = request.scope.get("sandgate.sandboxes")
        if sandboxes is not None:
            sandboxes.record_command(
                request.scope["sandgate.route"].sandbox_id,
                cmd=config["cmd"],
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
        raw = message.get("signal")
        signal = _SIGNALS.get(str(raw))
        if signal is None:
            raise RpcError("invalid_argument", f"unsupported signal {raw!r}")
        await guest_of(request).signal(signal, **_selector(message))

    return await unary_call(request, call)


async def send_input(request: Request) -> Response:
    async def call(message: dict[str, Any]) -> None:
        data = message.get("input") or {}
        if "pty" in data:
            payload, pty = _b64(data["pty"], "input.pty"), True
        else:
            payload, pty = _b64(data.get("stdin", ""), "input.stdin"), False
        await guest_of(request).send_input(payload, **_selector(message), pty=pty)

    return await unary_call(request, call)


async def close_stdin(request: Request) -> Response:
    async def call(message: dict[str, Any]) -> None:
        await guest_of(request).close_stdin(**_selector(message))

    return await unary_call(request, call)


async def update(request: Request) -> Response:
    async def call(message: dict[str, Any]) -> None:
        pty = message.get("pty")
        if not isinstance(pty, dict):
            return
        size = pty.get("size") or {}
        await guest_of(request).resize(
            int(size.get("cols", 80)), int(size.get("rows", 24)), **_selector(message)
        )

    return await unary_call(request, call)


async def stream_input(request: Request) -> Response:
    """Client streaming: a ``start`` naming the process, then ``data`` events of input."""

    async def result() -> AsyncIterator[dict[str, Any]]:
        selector: dict[str, Any] | None = None
        try:
            async for message in read_stream_messages(request):
                if "start" in message:
                    selector = _selector(message["start"] or {})
                elif "data" in message:
                    if selector is None:
                        raise RpcError("failed_precondition", "send a start event first")
                    data = (message["data"] or {}).get("input") or {}
                    if "pty" in data:
                        payload, pty = _b64(data["pty"], "input.pty"), True
                    else:
                        payload, pty = _b64(data.get("stdin", ""), "input.stdin"), False
                    await guest_of(request).send_input(payload, **selector, pty=pty)
        except GuestError as exc:
            raise RpcError(exc.code, exc.message) from None
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
