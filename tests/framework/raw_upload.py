"""A raw HTTP/1.1 client for upload tests that must see *when* the server answers.

An SDK (httpx) writes the whole body before it reads the response, so it cannot tell an answer
given while the body was still arriving from one given at its end. :func:`post` writes the
body on a thread, from an iterator that may never end, while the calling thread reads the
response; it records how much of the body had been written when the answer arrived, whether
the server then closed the connection, and why the writer stopped.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import socket
import threading
import zlib
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlencode, urlsplit

MiB = 1024 * 1024
_HEAD_END = b"\r\n\r\n"


@dataclass
class RawResponse:
    status: int
    headers: dict[str, str]
    body: bytes
    #: Body bytes (before chunked framing) written when the response head arrived.
    sent_before_answer: int
    #: Body bytes written in all.
    sent: int
    #: The server closed the connection after its answer (FIN or reset).
    closed: bool
    #: The writer wrote the whole body (only possible for a finite one).
    body_completed: bool
    #: Why the writer stopped early: the OSError it got (the server closed), or None.
    writer_error: str | None

    def json(self) -> dict[str, Any]:
        value: dict[str, Any] = json.loads(self.body)
        return value


class _Writer(threading.Thread):
    def __init__(self, sock: socket.socket, body: Iterable[bytes], chunked: bool) -> None:
        super().__init__(daemon=True, name="raw-upload-writer")
        self._sock = sock
        self._body = body
        self._chunked = chunked
        self.stop = threading.Event()
        self.sent = 0
        self.completed = False
        self.error: str | None = None

    def run(self) -> None:
        try:
            for piece in self._body:
                if self.stop.is_set():
                    return
                framed = b"%x\r\n%s\r\n" % (len(piece), piece) if self._chunked else piece
                self._sock.sendall(framed)
                self.sent += len(piece)
            if self._chunked:
                self._sock.sendall(b"0\r\n\r\n")
            self.completed = True
        except OSError as exc:
            self.error = repr(exc)


def post(
    url: str,
    path: str,
    *,
    params: Mapping[str, str] | None = None,
    headers: Mapping[str, str],
    body: Iterable[bytes],
    content_length: int | None = None,
    send_body: bool = True,
    timeout: float = 60.0,
) -> RawResponse:
    """``POST path?params`` with ``body`` (chunked unless ``content_length`` is given).

    ``send_body=False`` sends only the head and waits for the answer (which must then come
    from the head alone). ``timeout`` bounds every socket operation, so a server that never
    answers fails the test instead of hanging it.
    """
    parts = urlsplit(url)
    sock = socket.create_connection((parts.hostname, parts.port or 80), timeout=timeout)
    sock.settimeout(timeout)
    target = path + (f"?{urlencode(dict(params))}" if params else "")
    lines = [f"POST {target} HTTP/1.1", f"Host: {parts.netloc}"]
    lines += [f"{name}: {value}" for name, value in headers.items()]
    if content_length is None:
        lines.append("Transfer-Encoding: chunked")
    else:
        lines.append(f"Content-Length: {content_length}")
    writer = _Writer(sock, body, chunked=content_length is None)
    try:
        sock.sendall(("\r\n".join(lines) + "\r\n\r\n").encode("latin-1"))
        if send_body:
            writer.start()
        status, response_headers, rest = _read_head(sock)
        sent_before_answer = writer.sent
        payload = _read_body(sock, response_headers, rest)
        closed = _closed(sock, writer, parts.netloc)
    finally:
        writer.stop.set()
        with contextlib.suppress(OSError):
            sock.shutdown(socket.SHUT_RDWR)
        sock.close()
        if writer.ident is not None:
            writer.join(timeout)
    return RawResponse(
        status=status,
        headers=response_headers,
        body=payload,
        sent_before_answer=sent_before_answer,
        sent=writer.sent,
        closed=closed,
        body_completed=writer.completed,
        writer_error=writer.error,
    )


def _read_head(sock: socket.socket) -> tuple[int, dict[str, str], bytes]:
    data = b""
    while _HEAD_END not in data:
        chunk = sock.recv(65536)
        if not chunk:
            raise AssertionError(f"the server closed without answering (got {data!r})")
        data += chunk
    head, _, rest = data.partition(_HEAD_END)
    status_line, *header_lines = head.decode("latin-1").split("\r\n")
    headers = {}
    for line in header_lines:
        name, _, value = line.partition(":")
        headers[name.strip().lower()] = value.strip()
    return int(status_line.split()[1]), headers, rest


def _read_body(sock: socket.socket, headers: dict[str, str], rest: bytes) -> bytes:
    length = int(headers.get("content-length", "0"))
    while len(rest) < length:
        chunk = sock.recv(65536)
        if not chunk:
            break
        rest += chunk
    return rest[:length]


def _closed(sock: socket.socket, writer: _Writer, host: str) -> bool:
    """Whether the server ends the connection after its answer (FIN or reset).

    Once the whole body was written, a server that keeps the connection is asked a second
    request on it: its answer proves the connection open at once, where waiting for a FIN
    that never comes would cost a timeout on every keep-alive answer. A server that answered
    before the body ended must close (else it would have to read the rest first): its FIN is
    waited for, bounded by the socket's timeout, which is slow only when it never comes.
    """
    if writer.ident is not None:
        # The writer ends once the body is written or the server stops taking it.
        writer.join(sock.gettimeout())
    if writer.completed:
        probe = f"GET / HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n"
        try:
            sock.sendall(probe.encode("latin-1"))
            return not sock.recv(65536).startswith(b"HTTP/1.")
        except TimeoutError:
            return False  # neither closed nor answering: still reading a body, say
        except OSError:
            return True
    try:
        while sock.recv(65536):
            pass
    except ConnectionResetError:
        return True
    except TimeoutError:
        return False
    return True


# -- bodies ----------------------------------------------------------------------------------


def endless(piece: bytes = b"\0" * (64 * 1024)) -> Iterator[bytes]:
    """A body that never ends: only the server's answer stops it."""
    return itertools.repeat(piece)


def endless_gzip() -> Iterator[bytes]:
    """A gzip stream of zeros that never ends (about 1 KiB on the wire per MiB inflated)."""
    deflate = zlib.compressobj(9, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
    zeros = b"\0" * MiB
    while True:
        yield deflate.compress(zeros) + deflate.flush(zlib.Z_SYNC_FLUSH)


def gzip_of_zeros(size: int) -> bytes:
    """A complete gzip stream of ``size`` zero bytes."""
    deflate = zlib.compressobj(9, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
    zeros = b"\0" * MiB
    out = [deflate.compress(zeros) for _ in range(size // MiB)]
    out.append(deflate.compress(b"\0" * (size % MiB)))
    out.append(deflate.flush())
    return b"".join(out)


BOUNDARY = "sgboundary7f3a"


def part_head(name: str, filename: str | None = None) -> bytes:
    disposition = f'form-data; name="{name}"'
    if filename is not None:
        disposition += f'; filename="{filename}"'
    return (
        f"--{BOUNDARY}\r\nContent-Disposition: {disposition}\r\n"
        "Content-Type: application/octet-stream\r\n\r\n"
    ).encode()


def multipart(files: Iterable[tuple[str, bytes]]) -> bytes:
    """A complete multipart body of ``file`` parts named by their paths."""
    out = [part_head("file", path) + data + b"\r\n" for path, data in files]
    return b"".join(out) + f"--{BOUNDARY}--\r\n".encode()


def multipart_content_type() -> str:
    return f"multipart/form-data; boundary={BOUNDARY}"


def endless_part(name: str, filename: str | None = None) -> Iterator[bytes]:
    """One multipart part whose data never ends."""
    yield part_head(name, filename)
    yield from endless()


def endless_parts(directory: str, size: int = MiB) -> Iterator[bytes]:
    """``file`` parts of ``size`` bytes each, to ``directory/0``, ``/1``, ... without end."""
    for index in itertools.count():
        yield part_head("file", f"{directory}/{index}") + b"\0" * size + b"\r\n"


def abandon(
    url: str,
    path: str,
    *,
    params: Mapping[str, str],
    headers: Mapping[str, str],
    body: bytes,
    before_leaving: Callable[[], object] = lambda: None,
) -> None:
    """Sends the head of a chunked upload and ``body``, calls ``before_leaving`` (the
    connection still open: a test waits there until the server has acted on the body, so
    what it checks afterwards cannot be seen before the server even started), then drops
    the connection mid-body."""
    parts = urlsplit(url)
    with socket.create_connection((parts.hostname, parts.port or 80), timeout=30) as sock:
        lines = [f"POST {path}?{urlencode(dict(params))} HTTP/1.1", f"Host: {parts.netloc}"]
        lines += [f"{name}: {value}" for name, value in headers.items()]
        lines.append("Transfer-Encoding: chunked")
        sock.sendall(("\r\n".join(lines) + "\r\n\r\n").encode("latin-1"))
        sock.sendall(b"%x\r\n%s\r\n" % (len(body), body))
        before_leaving()
