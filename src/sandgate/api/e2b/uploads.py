"""Uploads through envd's ``POST /files``, streamed and bounded while the bytes arrive.

Trust: the caller was authorised (access token or signed URL, files.py) before this runs, but
its body is untrusted input of any size, shape and pace. Enforced here, per request:

* a ``Content-Length`` above the limit is refused (413 ``too_large``) before a byte is read;
* the body is counted as it arrives (bytes on the wire, bytes after gzip, bytes of the files)
  and refused the moment a count crosses its limit, however it is framed (length or chunked),
  encoded (identity or gzip) or shaped (octet-stream or multipart);
* nothing is staged on the host: each piece goes from the HTTP body through the gzip decoder
  (bounded output per step) and the multipart parser straight to the guest, which writes it
  into a temp file beside its target inside the sandbox. The gateway holds a few hundred KiB
  per request, never a file, and no host disk at all;
* the targets change only once the whole body was received and every file staged (the
  guest's ``write_files``); on any failure (a limit, a malformed body, the client leaving, the
  sandbox's disk full, the guest gone) everything staged is removed.

Left to others: the sandbox's disk size (the runtime), who may upload (files.py, routing.py),
what a path names (the guest, as the selected user).
"""

from __future__ import annotations

import posixpath
import zlib
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Final

from python_multipart.exceptions import FormParserError
from python_multipart.multipart import MultipartParser, parse_options_header
from starlette.requests import ClientDisconnect, Request

from sandgate.api.e2b.connect import RpcError
from sandgate.api.e2b.filesystem import check_path
from sandgate.errors import InvalidPath, InvalidRequest, LimitExceeded, PayloadTooLarge
from sandgate.guest.client import EntryInfo, FileUpload, GuestClient

__all__ = ["Upload", "UploadLimits"]

MiB: Final = 1024 * 1024
#: Most output one inflate step produces: a gzip bomb is expanded one such piece at a time.
_INFLATE_PIECE: Final = 256 * 1024
_GZIP: Final = 16 + zlib.MAX_WBITS
_MAX_PART_HEADERS: Final = 16
#: One part header line; a Content-Disposition with a 4 KiB path, escaped, fits.
_MAX_PART_HEADER: Final = 16 * 1024


@dataclass(frozen=True)
class UploadLimits:
    """Per request. ``max_bytes`` bounds the files' bytes after gzip (per file and in total);
    the body as sent may exceed it by ``framing_bytes`` (multipart framing, gzip container),
    except an identity octet-stream body, which is the file itself."""

    max_bytes: int
    framing_bytes: int = MiB
    max_parts: int = 1000

    def too_large(self) -> PayloadTooLarge:
        return PayloadTooLarge(
            f"the upload is larger than the limit of {_size(self.max_bytes)}: send smaller "
            "files, or raise limits.max_upload_mib on the server"
        )


def _size(count: int) -> str:
    return f"{count // MiB} MiB" if count % MiB == 0 else f"{count} bytes"


class Upload:
    """One ``POST /files`` body being received. ``finished`` once the body was read to its
    end; a response sent before that must close the connection (files.py does)."""

    def __init__(self, request: Request, limits: UploadLimits) -> None:
        self._request = request
        self._limits = limits
        self.finished = False

    async def receive(
        self,
        guest: GuestClient,
        *,
        path: str | None,
        user: str | None,
        metadata: dict[str, str],
        into: str | None = None,
    ) -> list[EntryInfo]:
        """Streams the body's files into the sandbox; returns their entries once all are in
        place. ``path`` (the ``?path=`` query) names an octet-stream body's file, or the one
        file of a multipart body; ``into`` (the console's upload form) puts each part's file,
        by its base name, into that directory. Raises ``SandgateError``; ``GuestError`` from
        the guest."""
        headers = self._request.headers
        media, options = parse_options_header(headers.get("content-type", ""))
        encoding = headers.get("content-encoding", "identity").strip().lower()
        if encoding not in ("identity", "gzip"):
            raise InvalidRequest(
                f"unsupported content encoding {encoding!r}: send identity or gzip"
            )
        multipart = media == b"multipart/form-data"
        if not multipart and not path:
            raise InvalidRequest("path is required for octet-stream uploads")
        limits = self._limits
        exact = not multipart and encoding == "identity"
        limit = limits.max_bytes if exact else limits.max_bytes + limits.framing_bytes
        declared = headers.get("content-length", "")
        if declared.isdigit() and int(declared) > limit:
            raise limits.too_large()
        stream = self._counted(self._body(), limit)
        if encoding == "gzip":
            stream = self._counted(_gunzip(stream), limit)
        files = _FileBytes(limits)
        if not multipart:
            return await _receive_one(stream, files, guest, _path(path), user, metadata)
        boundary = options.get(b"boundary")
        if not boundary:
            raise InvalidRequest("the multipart content type has no boundary")
        parts = _Parts(boundary, limits.max_parts)
        return await _receive_parts(stream, parts, files, guest, path, user, metadata, into)

    async def _body(self) -> AsyncIterator[bytes]:
        try:
            async for chunk in self._request.stream():
                if chunk:
                    yield chunk
        except ClientDisconnect:
            raise InvalidRequest("the client left before the body ended") from None
        self.finished = True

    async def _counted(self, chunks: AsyncIterator[bytes], limit: int) -> AsyncIterator[bytes]:
        total = 0
        async for chunk in chunks:
            total += len(chunk)
            if total > limit:
                raise self._limits.too_large()
            yield chunk


class _FileBytes:
    """The bytes of the request's files so far; raises 413 before one past the limit is sent
    to the sandbox."""

    def __init__(self, limits: UploadLimits) -> None:
        self._limits = limits
        self._total = 0

    def add(self, count: int) -> None:
        self._total += count
        if self._total > self._limits.max_bytes:
            raise self._limits.too_large()


async def _gunzip(chunks: AsyncIterator[bytes]) -> AsyncIterator[bytes]:
    """Inflates a gzip body (one or more members, RFC 1952) at most ``_INFLATE_PIECE`` bytes
    per step, so the caller counts a bomb's output before more of it exists."""
    inflater = zlib.decompressobj(_GZIP)
    try:
        async for chunk in chunks:
            data = chunk
            while data:
                if inflater.eof:  # the next member, or garbage that fails its header check
                    inflater = zlib.decompressobj(_GZIP)
                piece = inflater.decompress(data, _INFLATE_PIECE)
                data = inflater.unused_data if inflater.eof else inflater.unconsumed_tail
                if piece:
                    yield piece
                # All input taken but the output was cut at the piece size: more is pending.
                while not data and len(piece) == _INFLATE_PIECE and not inflater.eof:
                    piece = inflater.decompress(b"", _INFLATE_PIECE)
                    if piece:
                        yield piece
                    data = inflater.unused_data if inflater.eof else inflater.unconsumed_tail
    except zlib.error:
        raise InvalidRequest("the request body is not valid gzip") from None
    if not inflater.eof:
        raise InvalidRequest("the request body is not valid gzip: it ends in the middle")


def _path(value: str | None) -> str:
    try:
        return check_path(value)
    except RpcError as exc:
        raise InvalidPath(exc.message) from None


async def _receive_one(
    stream: AsyncIterator[bytes],
    files: _FileBytes,
    guest: GuestClient,
    path: str,
    user: str | None,
    metadata: dict[str, str],
) -> list[EntryInfo]:
    async with await guest.upload(user=user, metadata=metadata) as upload:
        await upload.begin(path)
        async for piece in stream:
            files.add(len(piece))
            await upload.write(piece)
        await upload.end()
        return await upload.commit()


async def _receive_parts(
    stream: AsyncIterator[bytes],
    parts: _Parts,
    files: _FileBytes,
    guest: GuestClient,
    single_path: str | None,
    user: str | None,
    metadata: dict[str, str],
    into: str | None = None,
) -> list[EntryInfo]:
    """Each ``file`` part streams into the sandbox as it is parsed; other parts are read and
    dropped (their bytes still count). Part filenames are the targets (``?path`` names the
    only one), all distinct."""
    upload: FileUpload | None = None
    current: FileUpload | None = None  # the upload, while inside a 'file' part
    targets: set[str] = set()
    try:
        async for chunk in stream:
            if parts.done:
                continue  # an epilogue after the closing boundary: counted, ignored
            for event in parts.feed(chunk):
                if isinstance(event, _Data):
                    if current is not None:
                        files.add(len(event.data))
                        await current.write(event.data)
                elif isinstance(event, _PartStart):
                    current = None
                    if event.name != "file":
                        continue
                    target = _target(event.filename, single_path, len(targets), into)
                    if target in targets:
                        raise InvalidRequest(f"the path {target!r} appears twice in one upload")
                    targets.add(target)
                    if upload is None:
                        upload = await guest.upload(user=user, metadata=metadata)
                    await upload.begin(target)
                    current = upload
                elif current is not None:  # the end of a 'file' part
                    await current.end()
                    current = None
        if not parts.done:
            raise InvalidRequest("the multipart body ended before its closing boundary")
        if upload is None:
            raise InvalidRequest("no 'file' part in the multipart body")
        return await upload.commit()
    finally:
        if upload is not None:
            await upload.aclose()


def _target(
    filename: str | None, single_path: str | None, earlier: int, into: str | None = None
) -> str:
    if into is not None:
        base = posixpath.basename((filename or "").replace("\\", "/"))
        if base in ("", ".", ".."):
            raise InvalidRequest("choose a file to upload (the form's file field is empty)")
        return _path(posixpath.join(into, base))
    if single_path:
        if earlier:
            raise InvalidRequest(
                "?path names the file of a single-file upload, and this body has several "
                "'file' parts: leave ?path out and give each part its path as filename"
            )
        return _path(single_path)
    if not filename:
        raise InvalidRequest(
            "a 'file' part without a filename needs the upload's ?path: give the upload URL "
            "a path, or each part its destination path as filename"
        )
    return _path(filename)


@dataclass(frozen=True)
class _PartStart:
    name: str
    filename: str | None


@dataclass(frozen=True)
class _Data:
    data: bytes


@dataclass(frozen=True)
class _PartEnd:
    pass


_Event = _PartStart | _Data | _PartEnd


class _Parts:
    """python-multipart's streaming parser, its callbacks gathered into events per chunk fed.
    Holds only the current part's headers (bounded by the parser) and one chunk's events."""

    def __init__(self, boundary: bytes, max_parts: int) -> None:
        self.done = False
        self._max_parts = max_parts
        self._count = 0
        self._events: list[_Event] = []
        self._field = bytearray()
        self._value = bytearray()
        self._disposition = b""
        try:
            self._parser = MultipartParser(
                boundary,
                {
                    "on_part_begin": self._on_part_begin,
                    "on_header_field": self._on_header_field,
                    "on_header_value": self._on_header_value,
                    "on_header_end": self._on_header_end,
                    "on_headers_finished": self._on_headers_finished,
                    "on_part_data": self._on_part_data,
                    "on_part_end": self._on_part_end,
                    "on_end": self._on_end,
                },
                max_header_count=_MAX_PART_HEADERS,
                max_header_size=_MAX_PART_HEADER,
            )
        except FormParserError as exc:
            raise InvalidRequest(f"the multipart content type is invalid: {exc}") from None

    def feed(self, chunk: bytes) -> list[_Event]:
        try:
            self._parser.write(chunk)
        except FormParserError as exc:
            raise InvalidRequest(f"the multipart body is malformed: {exc}") from None
        events, self._events = self._events, []
        return events

    def _on_part_begin(self) -> None:
        self._count += 1
        if self._count > self._max_parts:
            raise LimitExceeded(f"more than {self._max_parts} parts in one upload")
        self._disposition = b""

    def _on_header_field(self, data: bytes, start: int, end: int) -> None:
        self._field += data[start:end]

    def _on_header_value(self, data: bytes, start: int, end: int) -> None:
        self._value += data[start:end]

    def _on_header_end(self) -> None:
        if self._field.strip().lower() == b"content-disposition":
            self._disposition = bytes(self._value)
        self._field.clear()
        self._value.clear()

    def _on_headers_finished(self) -> None:
        _, options = parse_options_header(self._disposition.decode("latin-1"))
        name = options.get(b"name", b"").decode("latin-1")
        raw = options.get(b"filename")
        self._events.append(_PartStart(name, None if raw is None else _decode(raw)))

    def _on_part_data(self, data: bytes, start: int, end: int) -> None:
        self._events.append(_Data(data[start:end]))

    def _on_part_end(self) -> None:
        self._events.append(_PartEnd())

    def _on_end(self) -> None:
        self.done = True


def _decode(raw: bytes) -> str:
    """A part's filename: UTF-8 as browsers and SDKs send it, else Latin-1 (as Starlette)."""
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        return raw.decode("latin-1")
