"""E2B's volume file API (``/volumecontent/{volumeID}/{file,dir,path}``, the SDK's ``Volume``
file methods), served on the control plane's port (the SDK's ``E2B_VOLUME_API_URL``, or
``https://api.<domain>``).

Authentication is the volume's token (``Authorization: Bearer <token>``, from
``VolumeAndToken``), not an API key; an unknown volume and a wrong token both answer 401.
Uploads stream to the volume as they arrive (bounded by its size: a full volume is 507 and
leaves nothing behind); downloads stream from it. This app sits in front of the control
plane's body buffering (``with_volume_content``), so a large upload is never held in memory.

Codes are E2B's: 201 for a written file or a made directory, 200 for reads and metadata, 204
for removal, 404 for a missing path (the SDKs raise ``VolumePathNotFoundException``). Every
error is JSON ``{"code", "message"}``. The operations themselves are ``volumes.files`` (B2:
nothing outside the volume is ever touched, under any race).
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator
from typing import Annotated, Any, BinaryIO, Final

from fastapi import FastAPI, Header, Query, Request, Response
from fastapi.responses import JSONResponse, StreamingResponse
from starlette.types import ASGIApp, Receive, Scope, Send

from sandgate.api.strict import QueryBool, QueryInt
from sandgate.errors import InvalidJson, InvalidRequest, PayloadTooLarge, Unauthenticated
from sandgate.store import Volume
from sandgate.strictjson import StrictJsonError, loads
from sandgate.volumes import VolumeService

__all__ = ["PREFIX", "build_volume_content_app", "with_volume_content"]

PREFIX: Final = "/volumecontent/"
_CHUNK: Final = 1024 * 1024
_PATCH_BODY_MAX: Final = 4096

Path = Annotated[str, Query(max_length=4096)]
Auth = Annotated[str | None, Header()]


def with_volume_content(control: ASGIApp, content: ASGIApp) -> ASGIApp:
    """``control`` for everything but ``/volumecontent/...``, which goes to ``content``."""

    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and str(scope.get("path", "")).startswith(PREFIX):
            await content(scope, receive, send)
        else:
            await control(scope, receive, send)

    return app


def build_volume_content_app(volumes: VolumeService) -> FastAPI:
    """The routes; the caller installs the error handlers (``api.app``)."""
    app = FastAPI(docs_url=None, redoc_url=None, openapi_url=None)

    def volume_of(volume_id: str, authorization: str | None) -> Volume:
        scheme, _, token = (authorization or "").partition(" ")
        if scheme.lower() != "bearer" or not token:
            raise Unauthenticated(
                "the volume file API needs 'Authorization: Bearer <volume token>' "
                "(the token Volume.create/connect gave)"
            )
        return volumes.authorize(volume_id, token.strip())

    @app.get("/volumecontent/{volume_id}/dir")
    async def list_dir(
        volume_id: str, path: Path, authorization: Auth = None, depth: QueryInt | None = None
    ) -> Response:
        row = volume_of(volume_id, authorization)
        entries = await volumes.run(row, lambda f: f.list_dir(path, 1 if depth is None else depth))
        return JSONResponse([entry.as_json() for entry in entries])

    @app.post("/volumecontent/{volume_id}/dir")
    async def make_dir(
        volume_id: str,
        path: Path,
        authorization: Auth = None,
        uid: QueryInt | None = None,
        gid: QueryInt | None = None,
        mode: QueryInt | None = None,
        force: QueryBool | None = None,
    ) -> Response:
        row = volume_of(volume_id, authorization)
        entry, _ = await volumes.run(
            row,
            lambda f: f.make_dir(path, uid=uid, gid=gid, mode=mode, parents=bool(force)),
        )
        return JSONResponse(entry.as_json(), status_code=201)

    @app.get("/volumecontent/{volume_id}/path")
    async def stat(volume_id: str, path: Path, authorization: Auth = None) -> Response:
        row = volume_of(volume_id, authorization)
        entry = await volumes.run(row, lambda f: f.stat(path))
        return JSONResponse(entry.as_json())

    @app.patch("/volumecontent/{volume_id}/path")
    async def update(
        volume_id: str, path: Path, request: Request, authorization: Auth = None
    ) -> Response:
        row = volume_of(volume_id, authorization)
        fields = await _patch_fields(request)
        entry = await volumes.run(
            row,
            lambda f: f.update(path, uid=fields["uid"], gid=fields["gid"], mode=fields["mode"]),
        )
        return JSONResponse(entry.as_json())

    @app.delete("/volumecontent/{volume_id}/path")
    async def remove(volume_id: str, path: Path, authorization: Auth = None) -> Response:
        row = volume_of(volume_id, authorization)
        await volumes.run(row, lambda f: f.remove(path))
        return Response(status_code=204)

    @app.get("/volumecontent/{volume_id}/file")
    async def read(volume_id: str, path: Path, authorization: Auth = None) -> Response:
        row = volume_of(volume_id, authorization)
        fd, size = await volumes.run(row, lambda f: f.open_for_reading(path))
        return StreamingResponse(
            _stream(os.fdopen(fd, "rb", buffering=0), size),
            media_type="application/octet-stream",
            headers={"Content-Length": str(size)},
        )

    @app.put("/volumecontent/{volume_id}/file")
    async def write(
        volume_id: str,
        path: Path,
        request: Request,
        authorization: Auth = None,
        uid: QueryInt | None = None,
        gid: QueryInt | None = None,
        mode: QueryInt | None = None,
        force: QueryBool | None = None,
    ) -> Response:
        row = volume_of(volume_id, authorization)
        upload = await volumes.run(
            row,
            lambda f: f.start_upload(path, uid=uid, gid=gid, mode=mode, parents=bool(force)),
        )
        try:
            async for chunk in request.stream():
                if chunk:
                    await asyncio.to_thread(upload.write, chunk)
            entry = await asyncio.to_thread(upload.commit)
        except BaseException:
            await asyncio.to_thread(upload.abort)
            raise
        return JSONResponse(entry.as_json(), status_code=201)

    return app


async def _patch_fields(request: Request) -> dict[str, int | None]:
    """The PATCH body ``{"uid"?, "gid"?, "mode"?}``, strict JSON, integers only."""
    body = bytearray()
    async for chunk in request.stream():
        body.extend(chunk)
        if len(body) > _PATCH_BODY_MAX:
            raise PayloadTooLarge(f"the metadata body may hold at most {_PATCH_BODY_MAX} bytes")
    try:
        parsed: Any = loads(bytes(body)) if body.strip() else {}
    except StrictJsonError as exc:
        raise InvalidJson(exc.describe("request body")) from None
    if not isinstance(parsed, dict):
        raise InvalidRequest('the body must be a JSON object like {"mode": 420}')
    fields: dict[str, int | None] = {}
    for key in ("uid", "gid", "mode"):
        value = parsed.get(key)
        if value is not None and (not isinstance(value, int) or isinstance(value, bool)):
            raise InvalidRequest(f"{key} must be an integer")
        fields[key] = value
    return fields


async def _stream(file: BinaryIO, size: int) -> AsyncIterator[bytes]:
    """``size`` bytes of ``file`` (fewer if the file shrank), read off the event loop. The
    file object owns the fd, so it is closed however the response ends, even when the client
    leaves before the first chunk (the unstarted generator and the file are collected)."""
    with file:
        left = size
        while left > 0:
            chunk = await asyncio.to_thread(file.read, min(_CHUNK, left))
            if not chunk:
                break
            left -= len(chunk)
            yield chunk
