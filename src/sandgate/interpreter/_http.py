"""Just enough HTTP/1.1 for one request per connection (the gateway sends
``Connection: close``): parse a request, answer JSON or text, or stream chunked lines.

Request bodies are strict JSON (``sandgate.strictjson``, vendored next to this package): a
duplicate key, ``NaN``, a lone surrogate, invalid UTF-8, deep nesting or an out-of-range
integer is a 400 starting ``invalid_json:``, before any code runs."""

from __future__ import annotations

import asyncio
import dataclasses
import json
from typing import Any

from sandgate.strictjson import CODE, StrictJsonError, loads

__all__ = [
    "MAX_BODY_BYTES",
    "BadRequest",
    "Request",
    "end_stream",
    "read_request",
    "respond",
    "start_stream",
    "write_chunk",
]

MAX_BODY_BYTES = 16 * 1024 * 1024
_MAX_HEAD_BYTES = 64 * 1024
_REASONS = {200: "OK", 400: "Bad Request", 404: "Not Found", 405: "Method Not Allowed"}
_REASONS |= {413: "Content Too Large", 500: "Internal Server Error"}


class BadRequest(Exception):
    """The request cannot be parsed; ``status`` is the answer to give."""

    def __init__(self, message: str, status: int = 400) -> None:
        super().__init__(message)
        self.status = status


@dataclasses.dataclass(frozen=True, slots=True)
class Request:
    method: str
    path: str
    headers: dict[str, str]
    body: bytes

    def json(self) -> dict[str, Any]:
        """The body as a JSON object (empty body → ``{}``); raises ``BadRequest``."""
        if not self.body.strip():
            return {}
        try:
            value = loads(self.body)
        except StrictJsonError as exc:
            raise BadRequest(f"{CODE}: {exc.describe('request body')}") from None
        if value is None:
            return {}
        if not isinstance(value, dict):
            raise BadRequest("request body must be a JSON object")
        return value


async def read_request(reader: asyncio.StreamReader) -> Request | None:
    """Reads one request; ``None`` if the peer closed before sending one."""
    try:
        head = await reader.readuntil(b"\r\n\r\n")
    except asyncio.IncompleteReadError as exc:
        if not exc.partial:
            return None
        raise BadRequest("connection closed inside the request head") from None
    except asyncio.LimitOverrunError:
        raise BadRequest("request head too large", 413) from None
    lines = head.decode("latin-1").split("\r\n")
    try:
        method, target, _ = lines[0].split(" ", 2)
    except ValueError:
        raise BadRequest(f"malformed request line {lines[0]!r}") from None
    headers: dict[str, str] = {}
    for line in lines[1:]:
        if line:
            name, _, value = line.partition(":")
            headers[name.strip().lower()] = value.strip()
    if "chunked" in headers.get("transfer-encoding", "").lower():
        body = await _read_chunked(reader)
    else:
        length = int(headers.get("content-length", "0") or 0)
        if length > MAX_BODY_BYTES:
            raise BadRequest(f"request body over {MAX_BODY_BYTES} bytes", 413)
        body = await reader.readexactly(length) if length else b""
    return Request(method.upper(), target.split("?", 1)[0], headers, body)


async def _read_chunked(reader: asyncio.StreamReader) -> bytes:
    body = bytearray()
    while True:
        size_line = await reader.readuntil(b"\r\n")
        size = int(size_line.split(b";", 1)[0].strip() or b"0", 16)
        if size == 0:
            while (await reader.readuntil(b"\r\n")) != b"\r\n":
                pass
            return bytes(body)
        if len(body) + size > MAX_BODY_BYTES:
            raise BadRequest(f"request body over {MAX_BODY_BYTES} bytes", 413)
        body += await reader.readexactly(size)
        await reader.readexactly(2)


def _head(status: int, headers: dict[str, str]) -> bytes:
    lines = [f"HTTP/1.1 {status} {_REASONS.get(status, 'Status')}"]
    lines += [f"{name}: {value}" for name, value in headers.items()]
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")


async def respond(
    writer: asyncio.StreamWriter, status: int, body: Any, *, text: bool = False
) -> None:
    """Writes a complete response: ``body`` as JSON, or as plain text when ``text``."""
    payload = str(body).encode() if text else json.dumps(body).encode()
    content_type = "text/plain; charset=utf-8" if text else "application/json"
    writer.write(
        _head(
            status,
            {
                "Content-Type": content_type,
                "Content-Length": str(len(payload)),
                "Connection": "close",
            },
        )
        + payload
    )
    await writer.drain()


async def start_stream(writer: asyncio.StreamWriter) -> None:
    """Starts a 200 chunked response; follow with ``write_chunk`` and ``end_stream``."""
    writer.write(
        _head(
            200,
            {
                "Content-Type": "application/json",
                "Transfer-Encoding": "chunked",
                "Connection": "close",
            },
        )
    )
    await writer.drain()


async def write_chunk(writer: asyncio.StreamWriter, data: bytes) -> None:
    writer.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
    await writer.drain()


async def end_stream(writer: asyncio.StreamWriter) -> None:
    writer.write(b"0\r\n\r\n")
    await writer.drain()
