"""The sandbox page's file browser: a directory's entries, a file's download, an upload.

Every operation goes to the sandbox's guest exactly as envd's filesystem service and
``/files`` do (``api/e2b/filesystem.py``, ``files.py``, ``uploads.py``), as the sandbox's
default user (``user=None``): the guest resolves paths (empty or ``~``: home; relative: under
home) and the kernel decides what that user may read or write. The console adds no file
access of its own, so it can show or change nothing the E2B API could not.
"""

from __future__ import annotations

import posixpath
from dataclasses import dataclass
from urllib.parse import quote

from starlette.requests import Request
from starlette.responses import StreamingResponse

from sandgate.api.e2b.connect import RpcError
from sandgate.api.e2b.files import streamed
from sandgate.api.e2b.filesystem import check_path
from sandgate.api.e2b.guest_rpc import guest_failure
from sandgate.api.e2b.uploads import Upload
from sandgate.errors import InvalidPath, InvalidRequest
from sandgate.guest.client import EntryInfo, GuestClient, GuestError

__all__ = ["Listing", "download", "listing", "upload"]


@dataclass(frozen=True)
class Listing:
    """A directory as the browser shows it: its absolute path, its parent (None at ``/``),
    its entries (directories first, then by name)."""

    path: str
    parent: str | None
    entries: list[EntryInfo]


def _checked(raw: str | None) -> str:
    try:
        return check_path(raw)
    except RpcError as exc:
        raise InvalidPath(exc.message) from None


async def listing(guest: GuestClient, raw: str | None) -> Listing:
    """The directory ``raw`` names (empty: the default user's home). Raises a
    ``SandgateError`` with a message for a missing path, a file, or one the user may not
    read."""
    path = _checked(raw) or "~"
    try:
        here = await guest.stat(path)
        if here.type != "dir":
            raise InvalidPath(
                f"{here.path} is a file, not a directory: download it from its directory's list"
            )
        entries = await guest.list_dir(here.path, depth=1)
    except GuestError as exc:
        raise guest_failure(exc) from None
    entries.sort(key=lambda e: (e.type != "dir", e.name))
    parent = None if here.path == "/" else posixpath.dirname(here.path)
    return Listing(here.path, parent, entries)


async def download(guest: GuestClient, raw: str | None) -> StreamingResponse:
    """The file ``raw`` names, streamed as an attachment. Errors before the first byte (a
    missing file, a directory, no permission) are raised as ``SandgateError``."""
    path = _checked(raw)
    if not path:
        raise InvalidPath("path is required: the file to download")
    try:
        reader = await guest.read_file(path)
    except GuestError as exc:
        raise guest_failure(exc) from None

    name = reader.name.encode("utf-8", "surrogateescape")
    headers = {
        "content-disposition": f"attachment; filename*=UTF-8''{quote(name, safe='')}",
        "content-length": str(reader.length),
    }
    return StreamingResponse(
        streamed(reader), media_type="application/octet-stream", headers=headers
    )


async def upload(
    receiving: Upload, request: Request, guest: GuestClient, directory: str | None
) -> list[EntryInfo]:
    """Streams a multipart form's ``file`` part into ``directory`` (its base name kept),
    bounded by the limits ``receiving`` was made with (the E2B upload path's, counted as the
    bytes arrive; nothing staged on the host; the target replaced only once complete).
    ``receiving.finished`` says afterwards whether the body was read to its end (if not,
    the connection must close)."""
    target = _checked(directory)
    if not target:
        raise InvalidPath("dir is required: the directory to upload into")
    media = request.headers.get("content-type", "")
    if not media.startswith("multipart/form-data"):
        raise InvalidRequest("upload a file with the page's form (multipart/form-data)")
    try:
        return await receiving.receive(guest, path=None, user=None, metadata={}, into=target)
    except GuestError as exc:
        raise guest_failure(exc) from None
