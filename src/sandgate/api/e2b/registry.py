"""The push side of an OCI distribution registry (Docker's registry v2 API), for exactly the
repositories E2B CLI 1.x pushes a v1 template build to: ``e2b/custom-envs/<templateID>``.

Served on the control plane (``docker login <host>:<port>``; ``docker.<domain>`` routes here
too, as ``api.<domain>`` does): ``GET /v2/`` (the login check), blob ``HEAD``/``GET``, uploads
(``POST`` → ``PATCH``… → ``PUT ?digest=``; a ``POST ?digest=`` monolithic; a cross-repository
``mount`` is answered with a plain upload), manifest ``PUT``/``GET``/``HEAD``. Nothing else of
the API (catalog, tag lists, deletes) is served: 404 ``UNSUPPORTED``.

Route clash: E2B's own ``/v2/…`` routes (``/v2/sandboxes``, ``/v2/templates``) never start with
``/v2/e2b/``, and none is ``/v2/`` itself; ``with_registry`` sends only those two shapes here.

Trust: the caller is whoever holds a team's API key, sent as the password of HTTP Basic auth
(any user name; the E2B CLI uses ``_e2b_access_token``). SECURITY: every request but the
unauthenticated ``/v2/`` probe checks the key, and a repository is served only when its
template belongs to the key's team; another team's template (or none) is "repository not
found". A manifest may be pushed under a tag only when the tag is a build of that template
still waiting for its image, so a push never changes a built template. Storage rules (digests
computed here, atomic writes, the size cap) are ``templates._pushed``'s.
"""

from __future__ import annotations

import base64
import binascii
import errno
import re
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any, Final

from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.types import ASGIApp, Receive, Scope, Send

from sandgate.access import Principal, authenticate_api_key
from sandgate.errors import (
    Conflict,
    DiskFull,
    Forbidden,
    InvalidRequest,
    NotFound,
    SandgateError,
    Unauthenticated,
)
from sandgate.store import Store
from sandgate.templates import PushRefused, check_digest
from sandgate.templates.builds import BuildService, BuildState

__all__ = ["Registry", "with_registry"]

REPOSITORY_PREFIX: Final = "e2b/custom-envs/"
_ROUTE: Final = re.compile(
    r"^/v2/e2b/custom-envs/(?P<repo>[a-z0-9]{1,64})/"
    r"(?:blobs/uploads/?(?P<upload>[0-9a-f]{32})?|blobs/(?P<blob>[^/]+)|manifests/(?P<ref>[^/]+))$"
)
_API_VERSION: Final = ("Docker-Distribution-API-Version", "registry/2.0")
_REALM: Final = 'Basic realm="Sandgate registry (password: your API key)"'
_RANGE: Final = re.compile(r"^(?:bytes=)?(\d+)-(\d+)$")


class Registry:
    """The ASGI app serving the registry paths (``with_registry`` picks them out)."""

    def __init__(self, builds: BuildService, store: Store) -> None:
        self._builds = builds
        self._store = store

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        request = Request(scope, receive)
        try:
            response = await self._handle(request)
        except PushRefused as exc:
            response = _error(exc.oci, exc.error)
        except SandgateError as exc:
            response = _error(_OCI_OF.get(exc.status, "UNSUPPORTED"), exc)
        except OSError as exc:
            if exc.errno != errno.ENOSPC:
                raise
            response = _error("DENIED", DiskFull("the server's disk is full: try again later"))
        response.headers.setdefault(*_API_VERSION)
        await response(scope, receive, send)

    async def _handle(self, request: Request) -> Response:
        path = request.url.path
        method = request.method
        if path in ("/v2", "/v2/"):
            self._caller(request)
            return JSONResponse({}, headers=dict([_API_VERSION]))
        found = _ROUTE.match(path)
        if found is None:
            self._caller(request)
            raise PushRefused(
                "NAME_UNKNOWN",
                NotFound(
                    f"this registry serves only {REPOSITORY_PREFIX}<templateID> repositories "
                    "(E2B's v1 template build): tag the image as "
                    f"<host>/{REPOSITORY_PREFIX}<templateID>:<buildID>"
                ),
            )
        caller = self._caller(request)
        repo = found.group("repo")
        self._own(caller, repo)
        pushes = self._builds.pushes
        base = f"/v2/{REPOSITORY_PREFIX}{repo}"
        if found.group("ref") is not None:
            return await self._manifest(request, repo, found.group("ref"), base)
        if found.group("blob") is not None:
            return self._blob(method, repo, found.group("blob"))
        upload = found.group("upload")
        if upload is None:
            if method != "POST":
                raise _unsupported(method, path)
            digest = request.query_params.get("digest")
            new = pushes.new_upload(repo)
            if digest is not None:  # monolithic: the body is the whole blob
                check_digest(digest)
                await pushes.append(repo, new, _body(request), None)
                await pushes.finish(repo, new, digest)
                return _blob_created(base, digest)
            # A cross-repository mount (``?mount=&from=``) is answered as a plain upload: blobs
            # are never shared between repositories, so the client just sends it.
            return _upload_status(base, new, 0, 202)
        if method == "PATCH":
            start = _content_range(request.headers.get("content-range"))
            size = await pushes.append(repo, upload, _body(request), start)
            return _upload_status(base, upload, size, 202)
        if method == "PUT":
            digest = request.query_params.get("digest")
            if digest is None:
                raise PushRefused(
                    "DIGEST_INVALID", InvalidRequest("finish an upload with ?digest=sha256:<hex>")
                )
            check_digest(digest)
            await pushes.append(repo, upload, _body(request), None)
            await pushes.finish(repo, upload, digest)
            return _blob_created(base, digest)
        if method == "GET":
            return _upload_status(base, upload, pushes.upload_size(repo, upload), 204)
        if method == "DELETE":
            pushes.cancel(repo, upload)
            return Response(status_code=204)
        raise _unsupported(method, path)

    def _caller(self, request: Request) -> Principal:
        """The team of the API key in the Basic credentials (any user name)."""
        scheme, _, token = (request.headers.get("authorization") or "").partition(" ")
        if scheme.lower() != "basic" or not token:
            raise PushRefused(
                "UNAUTHORIZED",
                _unauthenticated("log in: docker login <host> -u _e2b_access_token -p <API key>"),
            )
        try:
            _, sep, password = base64.b64decode(token, validate=True).decode().partition(":")
        except (binascii.Error, UnicodeDecodeError):
            sep, password = "", ""
        if not sep:
            raise PushRefused("UNAUTHORIZED", _unauthenticated("malformed Basic credentials"))
        return authenticate_api_key(self._store, password)

    def _own(self, caller: Principal, repo: str) -> None:
        # SECURITY: another team's template is reported exactly like a missing one.
        try:
            self._builds.own_template(caller.team_id, repo)
        except (NotFound, Forbidden):
            raise PushRefused(
                "NAME_UNKNOWN",
                NotFound(
                    f"repository {REPOSITORY_PREFIX}{repo} not found: push to the templateID "
                    "that POST /templates returned to your team"
                ),
            ) from None

    def _blob(self, method: str, repo: str, digest: str) -> Response:
        if method not in ("GET", "HEAD"):
            raise _unsupported(method, f"blobs/{digest[:80]}")
        path = self._builds.pushes.blob(repo, digest)
        if path is None:
            raise PushRefused("BLOB_UNKNOWN", NotFound(f"blob {digest} is not in this repository"))
        headers = {
            "Docker-Content-Digest": digest,
            "Content-Length": str(path.stat().st_size),
            "Content-Type": "application/octet-stream",
        }
        if method == "HEAD":
            return Response(status_code=200, headers=headers)
        return StreamingResponse(_file_chunks(path), headers=headers)

    async def _manifest(self, request: Request, repo: str, ref: str, base: str) -> Response:
        pushes = self._builds.pushes
        if request.method in ("GET", "HEAD"):
            stored = pushes.manifest(repo, ref)
            if stored is None:
                raise PushRefused("MANIFEST_UNKNOWN", NotFound(f"no manifest {ref[:80]} here"))
            headers = {"Docker-Content-Digest": stored.digest, "Content-Type": stored.media_type}
            if request.method == "HEAD":
                headers["Content-Length"] = str(len(stored.body))
                return Response(status_code=200, headers=headers)
            return Response(stored.body, headers=headers)
        if request.method != "PUT":
            raise _unsupported(request.method, f"manifests/{ref[:80]}")
        if not ref.startswith("sha256:"):
            self._check_tag(repo, ref)
        body = bytearray()
        async for chunk in request.stream():
            body.extend(chunk)
            if len(body) > 4 * 1024 * 1024:
                raise PushRefused("MANIFEST_INVALID", InvalidRequest("the manifest is over 4 MiB"))
        content_type = request.headers.get("content-type") or ""
        stored = pushes.put_manifest(repo, ref, bytes(body), content_type)
        return Response(
            status_code=201,
            headers={
                "Location": f"{base}/manifests/{stored.digest}",
                "Docker-Content-Digest": stored.digest,
            },
        )

    def _check_tag(self, repo: str, tag: str) -> None:
        """A tag names a build of the template that still waits for its image."""
        build = self._builds.build_row(tag)
        if build is None or build.template_id != repo:
            raise PushRefused(
                "TAG_INVALID",
                InvalidRequest(
                    f"{tag[:80]} is not a build of template {repo}: tag the image with the "
                    "buildID that POST /templates (or POST /templates/{templateID}) returned"
                ),
            )
        if build.state != BuildState.WAITING.value:
            raise PushRefused(
                "DENIED",
                Conflict(
                    f"build {tag} is {build.state}; its image cannot change now: ask for a new "
                    f"build (POST /templates/{repo}) and push with its buildID"
                ),
            )


def with_registry(app: ASGIApp, registry: ASGIApp) -> ASGIApp:
    """Sends ``/v2/`` and ``/v2/e2b/…`` (the registry's paths, which no E2B route uses) to
    ``registry``, ahead of the control plane's JSON body checks; everything else to ``app``."""

    async def route(scope: Scope, receive: Receive, send: Send) -> None:
        path = str(scope.get("path", ""))
        if scope["type"] == "http" and (path in ("/v2", "/v2/") or path.startswith("/v2/e2b/")):
            await registry(scope, receive, send)
            return
        await app(scope, receive, send)

    return route


_OCI_OF: Final = {
    400: "UNSUPPORTED",
    401: "UNAUTHORIZED",
    403: "DENIED",
    404: "NAME_UNKNOWN",
    409: "DENIED",
    413: "DENIED",
    429: "TOOMANYREQUESTS",
}


def _error(oci: str, error: SandgateError) -> Response:
    body: dict[str, Any] = {"errors": [{"code": oci, "message": error.message, "detail": None}]}
    headers = {"WWW-Authenticate": _REALM} if error.status == 401 else None
    return JSONResponse(body, status_code=error.status, headers=headers)


def _unauthenticated(message: str) -> SandgateError:
    return Unauthenticated(message)


def _unsupported(method: str, what: str) -> PushRefused:
    return PushRefused(
        "UNSUPPORTED",
        NotFound(f"{method} {what[:120]} is not served: this registry only receives pushes"),
    )


def _content_range(value: str | None) -> int | None:
    if value is None:
        return None
    found = _RANGE.match(value.strip())
    if found is None:
        raise PushRefused(
            "BLOB_UPLOAD_INVALID", InvalidRequest(f"bad Content-Range {value[:60]!r}")
        )
    return int(found.group(1))


async def _body(request: Request) -> AsyncIterator[bytes]:
    async for chunk in request.stream():
        if chunk:
            yield chunk


def _blob_created(base: str, digest: str) -> Response:
    return Response(
        status_code=201,
        headers={"Location": f"{base}/blobs/{digest}", "Docker-Content-Digest": digest},
    )


def _upload_status(base: str, upload: str, size: int, status: int) -> Response:
    return Response(
        status_code=status,
        headers={
            "Location": f"{base}/blobs/uploads/{upload}",
            "Docker-Upload-UUID": upload,
            "Range": f"0-{max(size - 1, 0)}",
            "Content-Length": "0",
        },
    )


async def _file_chunks(path: Path) -> AsyncIterator[bytes]:
    with path.open("rb") as source:
        while chunk := source.read(1024 * 1024):
            yield chunk
