"""envd's ``POST /files/compose``: concatenate files into one, as the requesting user.

Contract (envd's OpenAPI in the SDKs): body ``{"source_paths": [..], "destination": str,
"username"?: str}`` → 200 ``EntryInfo`` of the destination; 400 bad paths or body, 401 an
invalid user, 404 a missing source, 507 no space. The sources are deleted once the
destination is in place, as envd does (a source that is also the destination is kept).

Atomic: every source is checked first (it exists, the user may read it, it is a regular
file), then their bytes are streamed, in order, into one upload of the destination, which the
guest writes to a temp file and renames into place only when all of it arrived. Any failure on
the way (a source removed meanwhile, no space, the client gone) abandons the upload: the
destination is left as it was and no source is deleted.
"""

from __future__ import annotations

import json
from typing import Any, Final

import structlog
from starlette.requests import Request
from starlette.responses import Response

from sandgate.api.e2b.connect import RpcError, json_bytes
from sandgate.api.e2b.filesystem import check_path
from sandgate.api.e2b.guest_rpc import guest_failure
from sandgate.api.e2b.users import parse_username
from sandgate.api.errors import e2b_error_response
from sandgate.guest.client import EntryInfo, GuestClient, GuestError

__all__ = ["MAX_SOURCES", "compose"]

log = structlog.get_logger("sandgate.envd")

#: Most source files one compose takes.
MAX_SOURCES: Final = 1000
#: Largest request body (the paths), bytes.
_MAX_BODY: Final = 4 * 1024 * 1024


class _Refused(Exception):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


def _error(status: int, message: str) -> Response:
    return Response(
        json_bytes({"code": status, "message": message}),
        status_code=status,
        media_type="application/json",
    )


async def _body(request: Request) -> tuple[list[str], str, str | None]:
    raw = b""
    async for chunk in request.stream():
        raw += chunk
        if len(raw) > _MAX_BODY:
            raise _Refused(413, f"the request body is larger than {_MAX_BODY} bytes")
    try:
        body: Any = json.loads(raw)
    except ValueError:
        raise _Refused(
            400, "the body must be JSON: {source_paths, destination, username?}"
        ) from None
    if not isinstance(body, dict):
        raise _Refused(400, "the body must be a JSON object: {source_paths, destination}")
    sources = body.get("source_paths")
    if not isinstance(sources, list) or not sources:
        raise _Refused(400, "source_paths must be a non-empty list of file paths")
    if len(sources) > MAX_SOURCES:
        raise _Refused(400, f"source_paths names {len(sources)} files; at most {MAX_SOURCES}")
    destination = body.get("destination")
    username = body.get("username")
    try:
        paths = [_path(p, "source_paths entry") for p in sources]
        target = _path(destination, "destination")
        if username is not None and not isinstance(username, str):
            raise RpcError("invalid_argument", "username must be a string")
        user = parse_username(username) if username else None
    except RpcError as exc:
        raise _Refused(401 if exc.code == "unauthenticated" else 400, exc.message) from None
    return paths, target, user


def _path(value: Any, name: str) -> str:
    if not isinstance(value, str) or not value.strip():
        raise RpcError("invalid_argument", f"{name} must be a non-empty path")
    return check_path(value, name)


async def compose(request: Request) -> Response:
    guest: GuestClient = request.scope["sandgate.route"].guest
    try:
        sources, destination, user = await _body(request)
    except _Refused as exc:
        return _error(exc.status, exc.message)
    try:
        entries = [await guest.stat(path, user=user) for path in sources]
        for path, entry in zip(sources, entries, strict=True):
            if entry.type != "file":
                return _error(400, f"source '{path[:200]}' is not a regular file")
        written = await _write(guest, sources, destination, user)
    except GuestError as exc:  # GuestUnavailable included
        return e2b_error_response(guest_failure(exc))
    for entry in {e.path: e for e in entries}.values():
        if entry.path == written.path:
            continue
        try:
            await guest.remove(entry.path, user=user)
        except GuestError as exc:
            # Composed already: a source that stays loses nothing; the caller may remove it.
            log.warning("compose.source_kept", path=entry.path[:200], error=exc.message)
    return Response(json_bytes(_entry(written)), media_type="application/json")


async def _write(
    guest: GuestClient, sources: list[str], destination: str, user: str | None
) -> EntryInfo:
    """Streams the sources, in order, into one upload of ``destination`` and commits it. On
    any failure the upload is abandoned, and this returns only once the guest removed what
    it staged (``FileUpload.aclose``)."""
    upload = await guest.upload(user=user)
    async with upload:
        await upload.begin(destination)
        for path in sources:
            reader = await guest.read_file(path, user=user)
            try:
                async for chunk in reader:
                    await upload.write(chunk)
            finally:
                await reader.aclose()
        await upload.end()
        return (await upload.commit())[0]


def _entry(entry: EntryInfo) -> dict[str, Any]:
    result: dict[str, Any] = {"path": entry.path, "name": entry.name, "type": "file"}
    if entry.metadata:
        result["metadata"] = entry.metadata
    return result
