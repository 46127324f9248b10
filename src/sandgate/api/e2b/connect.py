"""Connect-RPC over HTTP/1.1 with the JSON codec, as the E2B SDKs speak it.

Unary: ``application/json`` in and out; errors are non-200 JSON ``{"code", "message"}`` with
the Connect code as a string. Server streaming: one enveloped request message; the response is
``application/connect+json`` (exactly, without parameters), a sequence of ``0x00`` envelopes
flushed as they are produced, and always a final ``0x02`` end-of-stream envelope carrying
``{}`` or ``{"error": {...}}``. Envelope = flags u8 + length u32 BE + payload. No compression.

Every request message, unary or enveloped, is decoded by ``sandgate.strictjson``: a duplicate
key, ``NaN``, a lone surrogate, invalid UTF-8, deep nesting or an out-of-range integer is
``invalid_argument`` with a message starting ``invalid_json:`` (the stable code), before any
handler runs.
"""

from __future__ import annotations

import asyncio
import json
import logging
import struct
from collections.abc import AsyncIterator
from typing import Any, Final

from starlette.requests import Request
from starlette.responses import Response
from starlette.types import Receive, Scope, Send

from sandgate._tasks import cancel_and_wait
from sandgate.api.errors import CONNECT_STATUS
from sandgate.strictjson import CODE, StrictJsonError, loads_object

__all__ = [
    "STREAM_CONTENT_TYPE",
    "RpcError",
    "StreamDropped",
    "envelope",
    "json_bytes",
    "quiet_dropped_streams",
    "read_stream_messages",
    "read_stream_request",
    "read_unary_request",
    "rpc_error_response",
    "stream_error_response",
    "stream_response",
    "unary_response",
    "with_keepalive",
]

_ENVELOPE: Final = struct.Struct(">BI")
_FLAG_END: Final = 0x02
STREAM_CONTENT_TYPE: Final = "application/connect+json"
#: Largest RPC request message accepted (requests are small; file data uses /files).
MAX_REQUEST_BYTES: Final = 8 * 1024 * 1024


class RpcError(Exception):
    """An error to answer with a Connect code; raised by handlers, caught at the edge."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


class StreamDropped(Exception):
    """Raised inside a stream's messages to end the response without its end-of-stream
    envelope: the connection closes mid-body, as when the machine behind envd vanishes.

    Why: that is how every pinned client recognises a killed sandbox. A dropped stream makes
    it probe ``/health``; a 502 there and it reports "The sandbox was killed or reached its end
    of life while the request was in flight". An end-of-stream ``unavailable`` cannot say that
    to all of them (the JS SDKs and Python 2.31 read it as a generic sandbox timeout).
    """


class _DroppedStreamsFilter(logging.Filter):
    """The server logs an exception that ends a response as a failure; a dropped stream is a
    decision (``StreamDropped``), already logged where it was made."""

    def filter(self, record: logging.LogRecord) -> bool:
        exc = record.exc_info[1] if record.exc_info else None
        return not isinstance(exc, StreamDropped)


def quiet_dropped_streams(logger_name: str = "uvicorn.error") -> None:
    """Keeps ``StreamDropped`` out of the ASGI server's error log; idempotent."""
    logger = logging.getLogger(logger_name)
    if not any(isinstance(f, _DroppedStreamsFilter) for f in logger.filters):
        logger.addFilter(_DroppedStreamsFilter())


def json_bytes(message: Any) -> bytes:
    """``message`` as compact UTF-8 JSON that every client can decode.

    Names read from a sandbox may hold bytes that are not UTF-8 (a file called ``b"\\xff"``);
    they reach the gateway as lone surrogates (``surrogateescape``), which UTF-8 cannot encode.
    Such characters become U+FFFD, so the response is valid rather than a 500.
    """
    text = json.dumps(message, separators=(",", ":"), ensure_ascii=False)
    try:
        return text.encode()
    except UnicodeEncodeError:
        return json.dumps(_valid_text(message), separators=(",", ":"), ensure_ascii=False).encode()


def _valid_text(value: Any) -> Any:
    if isinstance(value, str):
        try:
            return value.encode("utf-8", "surrogateescape").decode("utf-8", "replace")
        except UnicodeEncodeError:
            return value.encode("utf-8", "replace").decode()
    if isinstance(value, dict):
        return {_valid_text(k): _valid_text(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_valid_text(v) for v in value]
    return value


def envelope(message: dict[str, Any], *, end: bool = False) -> bytes:
    payload = json_bytes(message)
    return _ENVELOPE.pack(_FLAG_END if end else 0, len(payload)) + payload


def rpc_error_response(error: RpcError) -> Response:
    return Response(
        json_bytes({"code": error.code, "message": error.message}),
        status_code=CONNECT_STATUS.get(error.code, 500),
        media_type="application/json",
    )


def stream_error_response(error: RpcError) -> Response:
    """A streaming call that failed before its first message: 200 + an end-of-stream error.

    connect-es (the JS SDK) maps a non-200 stream response from its HTTP status alone (404 →
    ``unimplemented``, 400 → ``internal``) and never reads the JSON body, so a stream error must
    travel in the end-of-stream envelope, as connect-go (envd) sends it.
    """
    return Response(
        envelope({"error": {"code": error.code, "message": error.message}}, end=True),
        headers={"content-type": STREAM_CONTENT_TYPE},
    )


def unary_response(message: dict[str, Any]) -> Response:
    return Response(json_bytes(message), media_type="application/json")


async def _read_body(request: Request) -> bytes:
    chunks = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > MAX_REQUEST_BYTES:
            raise RpcError("resource_exhausted", f"request larger than {MAX_REQUEST_BYTES} bytes")
        chunks.append(chunk)
    return b"".join(chunks)


def _decode(raw: bytes) -> dict[str, Any]:
    """One request message (an empty body is the empty message)."""
    if not raw:
        return {}
    try:
        return loads_object(raw)
    except StrictJsonError as exc:
        raise RpcError("invalid_argument", f"{CODE}: {exc.describe('request')}") from None


async def read_unary_request(request: Request) -> dict[str, Any]:
    media = request.headers.get("content-type", "").split(";")[0].strip()
    if media != "application/json":
        raise RpcError("unimplemented", f"unsupported content type {media!r}: use the JSON codec")
    return _decode(await _read_body(request))


async def read_stream_request(request: Request) -> dict[str, Any]:
    media = request.headers.get("content-type", "").split(";")[0].strip()
    if media != STREAM_CONTENT_TYPE:
        raise RpcError("unimplemented", f"unsupported content type {media!r}: use connect+json")
    raw = await _read_body(request)
    if len(raw) < _ENVELOPE.size:
        raise RpcError("invalid_argument", "missing request envelope")
    flags, length = _ENVELOPE.unpack_from(raw)
    if flags & 0x01:
        raise RpcError("unimplemented", "compressed messages are not supported")
    if flags:
        raise RpcError("invalid_argument", f"unexpected envelope flags {flags:#04x}")
    payload = raw[_ENVELOPE.size : _ENVELOPE.size + length]
    if len(payload) != length:
        raise RpcError("invalid_argument", "truncated request envelope")
    if len(raw) != _ENVELOPE.size + length:
        raise RpcError("invalid_argument", "a server-streaming request holds exactly one message")
    return _decode(payload)


async def read_stream_messages(request: Request) -> AsyncIterator[dict[str, Any]]:
    """Yields each enveloped message of a client-streaming request as it arrives; stops at
    an end-of-stream envelope or the end of the body."""
    media = request.headers.get("content-type", "").split(";")[0].strip()
    if media != STREAM_CONTENT_TYPE:
        raise RpcError("unimplemented", f"unsupported content type {media!r}: use connect+json")
    buffer = bytearray()
    async for chunk in request.stream():
        buffer.extend(chunk)
        while len(buffer) >= _ENVELOPE.size:
            flags, length = _ENVELOPE.unpack_from(buffer)
            if length > MAX_REQUEST_BYTES:
                raise RpcError("resource_exhausted", "request message too large")
            if len(buffer) < _ENVELOPE.size + length:
                break
            payload = bytes(buffer[_ENVELOPE.size : _ENVELOPE.size + length])
            del buffer[: _ENVELOPE.size + length]
            if flags & _FLAG_END:
                return
            if flags:
                raise RpcError("unimplemented", "compressed messages are not supported")
            yield _decode(payload)
    if buffer:
        raise RpcError("invalid_argument", "truncated request envelope")


def stream_response(messages: AsyncIterator[dict[str, Any]]) -> Response:
    """Streams ``messages`` as envelopes and finishes with end-of-stream.

    An ``RpcError`` raised by ``messages`` becomes the end-of-stream error. ``StreamDropped``
    (or any other exception) drops the connection instead (the client then probes
    ``/health``), which is what a sandbox vanishing mid-stream must look like.
    """
    return _EnvelopeStream(messages)


class _EnvelopeStream(Response):
    """A server-streaming response, sent without a task group: every ``commands.run`` is one,
    and Starlette's ``StreamingResponse`` spends more on its task group (two tasks and their
    cancel scopes) than on the few envelopes a short command sends. One task watches for the
    client's disconnect and cancels the stream, which closes ``messages`` (a process stream
    then only unsubscribes: the process runs on). The end-of-stream envelope and the end of
    the body go out in one write.
    """

    def __init__(self, messages: AsyncIterator[dict[str, Any]]) -> None:
        self._messages = messages
        self.status_code = 200
        self.background = None
        self.media_type = STREAM_CONTENT_TYPE
        self.init_headers()  # no body attribute: no content-length (the body is chunked)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        await send({"type": "http.response.start", "status": 200, "headers": self.raw_headers})
        streaming = asyncio.current_task()
        ended = False
        client_left = False

        async def watch() -> None:
            nonlocal client_left
            while (await receive())["type"] != "http.disconnect":
                pass
            if not ended and streaming is not None:
                client_left = True
                streaming.cancel()

        watcher = asyncio.ensure_future(watch())
        try:
            try:
                async for message in self._messages:
                    body = envelope(message)
                    await send({"type": "http.response.body", "body": body, "more_body": True})
                tail = envelope({}, end=True)
            except RpcError as exc:
                tail = envelope({"error": {"code": exc.code, "message": exc.message}}, end=True)
            ended = True  # from here a disconnect is the response's own end, not the client's
            await send({"type": "http.response.body", "body": tail, "more_body": False})
        except asyncio.CancelledError:
            if client_left and streaming is not None and streaming.uncancel() == 0:
                return  # the client went away: nobody is left to send to
            raise
        finally:
            ended = True
            watcher.cancel()
            aclose = getattr(self._messages, "aclose", None)
            if aclose is not None:
                await aclose()


#: What the pump of ``with_keepalive`` hands over when its source ended (or failed).
_SOURCE_ENDED: Final = object()


async def with_keepalive(
    source: AsyncIterator[dict[str, Any]],
    interval_s: float,
    keepalive: dict[str, Any],
    *,
    deadline_ms: int = 0,
) -> AsyncIterator[dict[str, Any]]:
    """Yields ``source``'s messages, inserting ``keepalive`` after ``interval_s`` of silence.

    With ``deadline_ms`` > 0 (the request's ``connect-timeout-ms``) the stream ends with
    ``deadline_exceeded`` once that much time has passed; the source is closed, which for a
    process or a watch only unsubscribes.

    One task reads the source into a one-place queue (so a slow client still holds back a
    chatty source), and each wait for it is bounded by a timer: a task and a wait per message,
    as before, cost more than the messages of a short command.
    """
    handover: asyncio.Queue[tuple[Any, BaseException | None]] = asyncio.Queue(maxsize=1)

    async def pump() -> None:
        try:
            async for message in source:
                await handover.put((message, None))
        except Exception as exc:  # RpcError, StreamDropped, a guest failure: the reader's
            await handover.put((_SOURCE_ENDED, exc))
            return
        finally:
            aclose = getattr(source, "aclose", None)
            if aclose is not None:
                await aclose()
        await handover.put((_SOURCE_ENDED, None))

    loop = asyncio.get_running_loop()
    deadline = loop.time() + deadline_ms / 1000 if deadline_ms > 0 else None
    reader = asyncio.ensure_future(pump())
    try:
        while True:
            wait = interval_s
            if deadline is not None:
                wait = min(wait, max(0.0, deadline - loop.time()))
            try:
                async with asyncio.timeout(wait):
                    message, error = await handover.get()
            except TimeoutError:
                if deadline is not None and loop.time() >= deadline:
                    raise RpcError("deadline_exceeded", "the stream reached its deadline") from None
                yield keepalive
                continue
            if error is not None:
                raise error
            if message is _SOURCE_ENDED:
                return
            yield message
    finally:
        await cancel_and_wait(reader)
