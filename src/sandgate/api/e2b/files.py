"""envd's plain-HTTP ``/files``: download and upload, by access token or signed URL.

SECURITY: signed URLs are checked here (the router lets ``/files`` with a ``signature`` through
without a token): the signature is recomputed from the query values and the sandbox's token and
compared in constant time; an expired one is refused. Files are read and written by the guest
as the selected user; writes are atomic (temp file + rename), so an interrupted upload never
leaves a half-written file.
"""

from __future__ import annotations

import base64
import hashlib
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any
from urllib.parse import quote

from starlette.requests import Request
from starlette.responses import Response, StreamingResponse

from sandgate._signed import signature_expired
from sandgate.access import tokens_equal
from sandgate.api.e2b.connect import RpcError, json_bytes
from sandgate.api.e2b.filesystem import check_path
from sandgate.api.e2b.guest_rpc import guest_failure
from sandgate.api.e2b.uploads import Upload, UploadLimits
from sandgate.api.e2b.users import parse_username
from sandgate.api.errors import e2b_error_response
from sandgate.errors import SandgateError
from sandgate.guest.client import EntryInfo, FileReader, GuestClient, GuestError

__all__ = ["download", "sign", "signature_matches", "streamed", "upload_endpoint"]

_METADATA_PREFIX = "x-metadata-"
_MAX_METADATA_KEY = 246
_MAX_METADATA_TOTAL = 4096


def _json(value: Any) -> Response:
    return Response(json_bytes(value), media_type="application/json")


def _error(status: int, message: str) -> Response:
    return Response(
        json_bytes({"code": status, "message": message}),
        status_code=status,
        media_type="application/json",
    )


def sign(path: str, operation: str, user: str, token: str, expiration: int | None) -> str:
    """The ``v1_`` signature the SDKs put in download/upload URLs."""
    raw = f"{path}:{operation}:{user}:{token}"
    if expiration is not None:
        raw += f":{expiration}"
    digest = base64.b64encode(hashlib.sha256(raw.encode()).digest()).decode().rstrip("=")
    return "v1_" + digest


def signature_matches(query: dict[str, str], operation: str, token: str) -> bool:
    expiration = query.get("signature_expiration")
    try:
        exp = int(expiration) if expiration else None
    except ValueError:
        return False
    expected = sign(query.get("path", ""), operation, query.get("username", ""), token, exp)
    return tokens_equal(query.get("signature"), expected)


def _authorise(request: Request, operation: str) -> Response | None:
    """None when allowed; otherwise the 401 to send. A token, if present, takes precedence."""
    route = request.scope["sandgate.route"]
    token = request.headers.get("x-access-token")
    if token is not None:
        return None if tokens_equal(token, route.access_token) else _unauthorised()
    query = dict(request.query_params)
    if "signature" not in query:
        return _unauthorised()
    if not signature_matches(query, operation, route.access_token):
        return _unauthorised()
    expiration = query.get("signature_expiration")
    if expiration and signature_expired(int(expiration), time.time()):
        return _error(401, "signature is already expired")
    return None


def _unauthorised() -> Response:
    return _error(
        401,
        "unauthorized access, please provide a valid access token or method signing if supported",
    )


def _user(request: Request) -> str | None:
    raw = request.query_params.get("username")
    if not raw:
        return None
    return parse_username(raw)


def _guest(request: Request) -> GuestClient:
    guest: GuestClient = request.scope["sandgate.route"].guest
    return guest


async def download(request: Request) -> Response:
    denied = _authorise(request, "read")
    if denied is not None:
        return denied
    try:
        path = check_path(request.query_params.get("path"))
        user = _user(request)
    except RpcError as exc:
        return _error(401 if exc.code == "unauthenticated" else 400, exc.message)
    wanted = _byte_range(request.headers.get("range"))
    try:
        offset, last = 0, None
        if wanted is not None:
            first, last = wanted
            if first is None:
                size = (await _guest(request).stat(path, user=user)).size
                first, last = max(0, size - (last or 0)), None
            offset = first
        length = None if last is None else last - offset + 1
        reader = await _guest(request).read_file(path, user=user, offset=offset, length=length)
    except GuestError as exc:  # GuestUnavailable included
        return _failure(guest_failure(exc))

    headers = {"content-disposition": _disposition(reader.name), "accept-ranges": "bytes"}
    status = 200
    if wanted is not None:
        if offset >= reader.size and reader.size > 0:
            await reader.aclose()
            return Response(status_code=416, headers={"content-range": f"bytes */{reader.size}"})
        status = 206
        end = reader.offset + reader.length - 1
        headers["content-range"] = f"bytes {reader.offset}-{end}/{reader.size}"
    headers["content-length"] = str(reader.length)
    return StreamingResponse(
        streamed(reader), status_code=status, media_type="application/octet-stream", headers=headers
    )


async def streamed(reader: FileReader) -> AsyncIterator[bytes]:
    """A guest file reader as a response body; the reader is closed when the body ends,
    whether the client read it all or went away."""
    try:
        async for chunk in reader:
            yield chunk
    finally:
        await reader.aclose()


def _byte_range(header: str | None) -> tuple[int | None, int | None] | None:
    """One ``bytes=`` range as (first, last), (None, suffix length) or None (whole file).

    Multiple ranges and malformed headers are ignored, which RFC 9110 allows.
    """
    if not header or not header.startswith("bytes=") or "," in header:
        return None
    first, sep, last = header[len("bytes=") :].strip().partition("-")
    if not sep or not (first.isdigit() or last.isdigit()):
        return None
    if not first:
        return None, int(last)
    if last and not last.isdigit():
        return None
    if last and int(last) < int(first):
        return None
    return int(first), int(last) if last else None


def _disposition(name: str) -> str:
    """``inline`` with the file's name; RFC 5987 ``filename*`` when it is not plain ASCII
    (header values are Latin-1 on the wire, and a sandbox's names may be any bytes)."""
    if name.isascii() and name.isprintable():
        return 'inline; filename="{}"'.format(name.replace("\\", "").replace('"', ""))
    raw = name.encode("utf-8", "surrogateescape")
    return f"inline; filename*=UTF-8''{quote(raw, safe='')}"


def _metadata(request: Request) -> dict[str, str]:
    metadata: dict[str, str] = {}
    total = 0
    for name, value in request.headers.items():
        if not name.startswith(_METADATA_PREFIX):
            continue
        key = name[len(_METADATA_PREFIX) :].lower()
        if not key or not _printable(key) or not _printable(value):
            raise RpcError("invalid_argument", "metadata keys and values must be printable ASCII")
        if len(key) > _MAX_METADATA_KEY:
            raise RpcError("invalid_argument", f"metadata key longer than {_MAX_METADATA_KEY}")
        total += len(key) + len(value)
        if total > _MAX_METADATA_TOTAL:
            raise RpcError("invalid_argument", f"metadata larger than {_MAX_METADATA_TOTAL} bytes")
        metadata[key] = value
    return metadata


def _printable(text: str) -> bool:
    return all(0x20 <= ord(c) <= 0x7E for c in text)


def _upload_result(entry: EntryInfo) -> dict[str, Any]:
    result: dict[str, Any] = {
        "path": entry.path,
        "name": entry.name,
        "type": "dir" if entry.type == "dir" else "file",
    }
    if entry.metadata:
        result["metadata"] = entry.metadata
    return result


def upload_endpoint(limits: UploadLimits) -> Callable[[Request], Awaitable[Response]]:
    """``POST /files`` with ``limits``: streamed into the sandbox as it arrives (uploads.py)."""

    async def upload(request: Request) -> Response:
        receiving = Upload(request, limits)
        response = await _upload(request, receiving)
        if not receiving.finished:
            # Answered before the body ended (a refusal): the rest is never read, and a
            # keep-alive connection would have to read it all first, so it closes instead.
            response.headers["connection"] = "close"
        return response

    return upload


async def _upload(request: Request, receiving: Upload) -> Response:
    denied = _authorise(request, "write")
    if denied is not None:
        return denied
    try:
        user = _user(request)
        metadata = _metadata(request)
        entries = await receiving.receive(
            _guest(request), path=request.query_params.get("path"), user=user, metadata=metadata
        )
    except RpcError as exc:
        return _error(401 if exc.code == "unauthenticated" else 400, exc.message)
    except GuestError as exc:  # GuestUnavailable included
        return _failure(guest_failure(exc))
    except SandgateError as exc:
        return _failure(exc)
    return _json([_upload_result(entry) for entry in entries])


def _failure(error: SandgateError) -> Response:
    """The error as E2B's JSON (``code`` is the status), with our stable ``error_code``."""
    return e2b_error_response(error)
