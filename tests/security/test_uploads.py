"""Uploads are streamed and bounded as the bytes arrive (issue 12, class 3), on every runtime.

A server per runtime with a small upload limit and a small disk (``LIMITS``). Each test asserts
what the client sees (status and stable ``error_code``, and *when*: bodies here never end, so an
answer at all proves it came before the body's end, and the connection must then close), what
the sandbox keeps (a target changes only when the whole upload succeeded; no staging is left),
and, where it applies, what the gateway holds (no host file, bounded memory). The raw client
(tests/framework/raw_upload.py) writes the body on a thread while it reads the answer.
"""

from __future__ import annotations

import hashlib
import itertools
import os
import stat
import threading
import zlib
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path

import httpx
import pytest

from sandgate.api.e2b.files import sign
from tests.fixtures.server import RunningServer
from tests.framework import raw_upload
from tests.framework.raw_upload import (
    BOUNDARY,
    MiB,
    RawResponse,
    endless,
    endless_gzip,
    endless_part,
    endless_parts,
    gzip_of_zeros,
    multipart,
    multipart_content_type,
    part_head,
)
from tests.framework.sandbox_http import SandboxHttp, open_sandbox, rss_bytes, wait_for

# The disk key is renamed with the copy-on-write root (disk_mib): one line each here.
LIMITS = {"disk_mib": 96, "max_upload_mib": 8}
#: Uploads may be larger than the disk: where the disk ends is then the sandbox's business.
ROOMY_LIMITS = {"disk_mib": 32, "max_upload_mib": 64}
LIMIT = LIMITS["max_upload_mib"] * MiB
#: Body bytes that can sit in buffers (the client's and the server's sockets, the server's read
#: buffer) when the answer arrives. The bodies are endless, so any bound shows the point.
IN_FLIGHT = 32 * MiB
#: Gateway RSS growth allowed while hundreds of MiB stream through it (baseline ~100 MiB).
RSS_BUDGET = 64 * MiB
OCTET = "application/octet-stream"
CLOSING = f"\r\n--{BOUNDARY}--\r\n".encode()


@pytest.fixture(scope="module")
def server(runtime_server_factory: Callable[..., RunningServer]) -> RunningServer:
    return runtime_server_factory(config={"limits": LIMITS})


@pytest.fixture(scope="module")
def box(server: RunningServer) -> Iterator[SandboxHttp]:
    sandbox = open_sandbox(server.url, server.api_key)
    yield sandbox
    sandbox.kill()


@pytest.fixture(scope="module")
def roomy_box(runtime_server_factory: Callable[..., RunningServer]) -> Iterator[SandboxHttp]:
    server = runtime_server_factory(config={"limits": ROOMY_LIMITS})
    sandbox = open_sandbox(server.url, server.api_key)
    yield sandbox
    sandbox.kill()


def _upload(
    box: SandboxHttp,
    body: Iterable[bytes],
    *,
    path: str | None = None,
    content_type: str = OCTET,
    encoding: str | None = None,
    content_length: int | None = None,
    send_body: bool = True,
    signed: bool = False,
) -> RawResponse:
    params = {"path": path} if path else {}
    headers = {} if signed else dict(box.headers)
    if signed:  # an upload URL: no token, no routing headers
        params["signature"] = sign(path or "", "write", "", box.token, None)
    headers["Content-Type"] = content_type
    if encoding is not None:
        headers["Content-Encoding"] = encoding
    return raw_upload.post(
        box.url,
        "/files",
        params=params,
        headers=headers,
        body=body,
        content_length=content_length,
        send_body=send_body,
    )


def _error(response: RawResponse, status: int, code: str) -> dict[str, object]:
    assert response.status == status, (response.status, response.body[:500])
    body = response.json()
    assert body["code"] == status and body["error_code"] == code, body
    assert isinstance(body["message"], str) and body["message"], body
    return body


def _too_large_early(response: RawResponse) -> None:
    """413 ``too_large`` while the body was still being sent, and the connection closed."""
    body = _error(response, 413, "too_large")
    assert "8 MiB" in str(body["message"]) and "max_upload_mib" in str(body["message"]), body
    assert not response.body_completed
    assert response.sent_before_answer < LIMIT + IN_FLIGHT, response.sent_before_answer
    assert response.closed, "the connection stayed open after an answer given mid-body"


def _fresh(box: SandboxHttp, name: str) -> str:
    """A directory holding ``keep`` (content ``original``) and nothing else."""
    directory = f"/home/user/up-{name}"
    box.sh(f"rm -rf {directory} && mkdir -p {directory} && printf original > {directory}/keep")
    return directory


def _listing(box: SandboxHttp, directory: str) -> list[str]:
    return sorted(box.sh(f"ls -A {directory}").split())


def _intact(box: SandboxHttp, directory: str, *others: str) -> None:
    """``keep`` still holds ``original`` and nothing was staged or left beside it."""
    assert _listing(box, directory) == sorted(["keep", *others])
    assert box.sh(f"cat {directory}/keep") == "original"


def _sha256_inside(box: SandboxHttp, path: str) -> str:
    return box.sh(f"sha256sum {path}").split()[0]


def _gzipped(pieces: Iterable[bytes]) -> Iterator[bytes]:
    deflate = zlib.compressobj(6, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
    for piece in pieces:
        yield deflate.compress(piece) + deflate.flush(zlib.Z_SYNC_FLUSH)


def test_upload_bounded_413_before_body_ends(box: SandboxHttp) -> None:
    directory = _fresh(box, "bounded")
    # A declared length above the limit is refused from the head alone: nothing is read.
    for content_type, encoding in (
        (OCTET, None),
        (OCTET, "gzip"),
        (multipart_content_type(), None),
    ):
        response = _upload(
            box,
            endless(),
            path=f"{directory}/keep",
            content_type=content_type,
            encoding=encoding,
            content_length=1 << 40,
            send_body=False,
        )
        _error(response, 413, "too_large")
        assert response.closed and response.sent == 0
    # The limit itself fits; one byte more does not, however it is sent.
    exact = os.urandom(LIMIT)
    assert box.put_file(f"{directory}/exact", exact).status_code == 200
    assert _sha256_inside(box, f"{directory}/exact") == hashlib.sha256(exact).hexdigest()
    over = box.put_file(f"{directory}/keep", exact + b"!")
    assert (over.status_code, over.json()["error_code"]) == (413, "too_large")
    form = multipart([(f"{directory}/form", exact)])
    fits = box.http.post(
        f"{box.url}/files",
        content=form,
        headers={**box.headers, "content-type": multipart_content_type()},
    )
    assert fits.status_code == 200, fits.text
    assert fits.json()[0]["path"] == f"{directory}/form"
    overflow = multipart([(f"{directory}/keep", exact + b"!")])
    response = _upload(
        box, [overflow], content_type=multipart_content_type(), content_length=len(overflow)
    )
    _error(response, 413, "too_large")
    _intact(box, directory, "exact", "form")


def test_upload_without_content_length_bounded(box: SandboxHttp) -> None:
    directory = _fresh(box, "chunked")
    _too_large_early(_upload(box, endless(), path=f"{directory}/keep"))
    _too_large_early(_upload(box, endless(), path=f"{directory}/new"))
    _intact(box, directory)


def test_upload_gzip_expanded_size_bounded(box: SandboxHttp) -> None:
    directory = _fresh(box, "gzip")
    # A body that inflates without end, a few KiB on the wire per limit.
    _too_large_early(_upload(box, endless_gzip(), path=f"{directory}/keep", encoding="gzip"))
    # A small, honestly sized body: its declared length fits, what it inflates to does not.
    bomb = gzip_of_zeros(256 * MiB)
    assert len(bomb) < MiB
    response = _upload(
        box, [bomb], path=f"{directory}/keep", encoding="gzip", content_length=len(bomb)
    )
    _error(response, 413, "too_large")
    # A gzipped multipart body is bounded by what it inflates to as well.
    _too_large_early(
        _upload(
            box,
            _gzipped(endless_part("file", f"{directory}/keep")),
            content_type=multipart_content_type(),
            encoding="gzip",
        )
    )
    _intact(box, directory)
    # Up to the limit, inflated: written whole.
    fits = gzip_of_zeros(LIMIT)
    response = _upload(
        box, [fits], path=f"{directory}/zeros", encoding="gzip", content_length=len(fits)
    )
    assert response.status == 200, response.body
    assert box.sh(f"stat -c %s {directory}/zeros") == f"{LIMIT}\n"


def test_upload_multipart_bounded(box: SandboxHttp) -> None:
    directory = _fresh(box, "multipart")
    kind = multipart_content_type()
    # One file part without end.
    _too_large_early(_upload(box, endless_part("file", f"{directory}/keep"), content_type=kind))
    # Many files, each well under the limit, together over it: none of them is written.
    _too_large_early(_upload(box, endless_parts(directory), content_type=kind))
    # Parts that are not files are read and dropped, but their bytes count.
    _too_large_early(_upload(box, endless_part("note"), content_type=kind))
    # A signed upload URL is bounded the same way.
    _too_large_early(
        _upload(box, endless_part("file"), path=f"{directory}/keep", content_type=kind, signed=True)
    )
    _intact(box, directory)


def test_upload_failure_leaves_destination_intact(box: SandboxHttp) -> None:
    directory = _fresh(box, "intact")
    target = f"{directory}/keep"
    kind = multipart_content_type()
    box.sh(f"mkdir {directory}/adir")
    # Over the limit, raw and as the second file of a multipart body.
    _too_large_early(_upload(box, endless(), path=target))
    first = part_head("file", f"{directory}/new") + os.urandom(MiB) + b"\r\n"
    _too_large_early(
        _upload(box, itertools.chain([first], endless_part("file", target)), content_type=kind)
    )
    _intact(box, directory, "adir")
    # gzip that turns invalid mid-stream.
    valid = next(_gzipped([os.urandom(2 * MiB)]))
    broken = itertools.chain([valid, b"not gzip any more" * 1000], endless())
    response = _upload(box, broken, path=target, encoding="gzip")
    _error(response, 400, "invalid_request")
    assert response.closed
    # Multipart bodies that are wrong as a whole: cut before the closing boundary, the same
    # path twice, a later file the guest refuses (a directory). Earlier files are not kept.
    for body in (
        part_head("file", target) + os.urandom(MiB),
        multipart([(target, b"one"), (target, b"two")]),
        multipart([(target, b"new content"), (f"{directory}/adir", b"x")]),
    ):
        response = _upload(box, [body], content_type=kind, content_length=len(body))
        _error(response, 400, "invalid_request")
        _intact(box, directory, "adir")

    # The client leaves mid-body: what was staged is removed once the gateway notices. It
    # leaves only once the staging is there, so its removal is what the wait below sees.
    def staged() -> None:
        def temp_file_beside_keep() -> bool:
            return any(n.startswith(".keep.") and ".sgtmp-" in n for n in _listing(box, directory))

        wait_for(temp_file_beside_keep, 60, "the upload to be staged beside keep")

    for params, content_type, prefix in (
        ({"path": target}, OCTET, os.urandom(2 * MiB)),
        ({}, kind, part_head("file", target) + os.urandom(2 * MiB)),
    ):
        raw_upload.abandon(
            box.url,
            "/files",
            params=params,
            headers={**box.headers, "Content-Type": content_type},
            body=prefix,
            before_leaving=staged,
        )
        wait_for(lambda: _listing(box, directory) == ["adir", "keep"], 60, "staging to be removed")
        _intact(box, directory, "adir")


def _fill_disk(box: SandboxHttp) -> None:
    """Writes until the sandbox's disk says no. bwrap also caps one file's size at the disk
    size (RLIMIT_FSIZE, so dd may stop with "File too large"); a second file then takes the
    rest."""
    for name in ("fill1", "fill2"):
        box.run(f"dd if=/dev/zero of=/home/user/{name} bs=1M count=4096 status=none")


def test_upload_disk_full_same_status_every_runtime(roomy_box: SandboxHttp) -> None:
    """507 ``disk_full`` (E2B's status; SDKs raise NotEnoughSpaceException) whatever the kernel
    said: ENOSPC from a full file system, or EFBIG from bwrap's file-size rlimit, which a file
    larger than the disk meets first (it was a 500 on bwrap)."""
    box = roomy_box
    directory = _fresh(box, "full")
    target = f"{directory}/keep"
    kind = multipart_content_type()
    larger = 48 * MiB  # than the disk, within the upload limit
    for how, response in (
        ("raw", _upload(box, [os.urandom(larger)], path=target, content_length=larger)),
        ("multipart", _upload(box, [multipart([(target, os.urandom(larger))])], content_type=kind)),
        ("gzip", _upload(box, [gzip_of_zeros(larger)], path=f"{directory}/new", encoding="gzip")),
    ):
        body = _error(response, 507, "disk_full")
        assert "space" in str(body["message"]), (how, body)
        _intact(box, directory)
    small = os.urandom(MiB)
    _fill_disk(box)
    try:
        attempts: list[tuple[str, RawResponse]] = [
            ("raw", _upload(box, [small], path=target, content_length=MiB)),
            ("chunked", _upload(box, [small], path=f"{directory}/new")),
            ("gzip", _upload(box, _gzipped([small]), path=target, encoding="gzip")),
            ("multipart", _upload(box, [multipart([(target, small)])], content_type=kind)),
            (
                "signed",
                _upload(
                    box, [multipart([(target, small)])], path=target, content_type=kind, signed=True
                ),
            ),
        ]
        for how, response in attempts:
            body = _error(response, 507, "disk_full")
            assert "space" in str(body["message"]), (how, body)
        _intact(box, directory)
        # Room for part of an upload: it fails where the disk ends, and leaves nothing.
        box.sh("rm -f /home/user/fill2 && truncate -s -4M /home/user/fill1")
        response = _upload(box, [os.urandom(6 * MiB)], path=target, content_length=6 * MiB)
        _error(response, 507, "disk_full")
        _intact(box, directory)
    finally:
        box.sh("rm -f /home/user/fill1 /home/user/fill2")
    data = os.urandom(6 * MiB)
    assert box.put_file(target, data).status_code == 200
    assert _sha256_inside(box, target) == hashlib.sha256(data).hexdigest()


def _host_staging(pid: int, own: Path) -> list[str]:
    """Regular files the gateway holds open that could stage an upload: anything deleted
    (an anonymous temp file) or outside ``own`` (its home and log: database, audit...)."""
    found = []
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            target = os.readlink(f"/proc/{pid}/fd/{fd}")
            regular = stat.S_ISREG(os.stat(f"/proc/{pid}/fd/{fd}").st_mode)
        except OSError:
            continue  # closed meanwhile
        if not target.startswith("/"):
            continue  # not a file system path: a namespace (idmapped mounts), a pipe, a socket
        if regular and (target.endswith("(deleted)") or not target.startswith(f"{own}/")):
            found.append(target)
    return found


def test_upload_is_streamed_into_the_sandbox_not_staged_on_the_host(
    box: SandboxHttp, server: RunningServer
) -> None:
    assert server.process is not None
    directory = _fresh(box, "stream")
    data = os.urandom(6 * MiB)
    release = threading.Event()

    def body() -> Iterator[bytes]:
        yield part_head("file", f"{directory}/big")
        yield data[: 4 * MiB]
        release.wait(60)  # the client pauses in the middle of the body
        yield data[4 * MiB :] + CLOSING

    result: list[RawResponse] = []
    sender = threading.Thread(
        target=lambda: result.append(_upload(box, body(), content_type=multipart_content_type()))
    )
    sender.start()
    try:
        # The body has not ended, and its bytes are already inside the sandbox...
        wait_for(
            lambda: _staged_bytes(box, directory) >= 3 * MiB,
            30,
            "the first bytes of the upload to reach the sandbox",
        )
        assert "big" not in _listing(box, directory)  # ...staged, not yet in place
        # ...while the gateway holds no file for them.
        assert _host_staging(server.process.pid, server.home.parent) == []
    finally:
        release.set()
        sender.join(60)
    assert result and result[0].status == 200, result and result[0].body
    assert _listing(box, directory) == ["big", "keep"]
    assert _sha256_inside(box, f"{directory}/big") == hashlib.sha256(data).hexdigest()


def _staged_bytes(box: SandboxHttp, directory: str) -> int:
    sizes = box.sh(f"find {directory} -name '.*.sgtmp-*' -printf '%s\\n'").split()
    return sum(int(size) for size in sizes)


def test_upload_memory_bounded_while_streaming_hundreds_of_mib(
    runtime_server: RunningServer,
) -> None:
    """256 MiB as one multipart file and 256 MiB inflated from gzip, through a server with
    the default limit: the gateway's memory stays flat."""
    assert runtime_server.process is not None
    pid = runtime_server.process.pid
    sandbox = open_sandbox(runtime_server.url, runtime_server.api_key)
    size = 256 * MiB
    try:
        before = rss_bytes(pid)
        peak = before
        done = threading.Event()

        def sample() -> None:
            nonlocal peak
            while not done.wait(0.05):
                peak = max(peak, rss_bytes(pid))

        sampler = threading.Thread(target=sample)
        sampler.start()
        try:

            def form() -> Iterator[bytes]:
                yield part_head("file", "/home/user/form.bin")
                for _ in range(size // MiB):
                    yield b"\1" * MiB
                yield CLOSING

            uploaded = sandbox.http.post(
                f"{sandbox.url}/files",
                content=form(),
                headers={**sandbox.headers, "content-type": multipart_content_type()},
                timeout=300,
            )
            assert uploaded.status_code == 200, uploaded.text
            inflated = sandbox.put_file(
                "/home/user/zeros.bin",
                gzip_of_zeros(size),
                headers={"content-encoding": "gzip"},
                timeout=300,
            )
            assert inflated.status_code == 200, inflated.text
        finally:
            done.set()
            sampler.join()
        sizes = sandbox.sh("stat -c %s /home/user/form.bin /home/user/zeros.bin").split()
        assert sizes == [str(size), str(size)]
        assert peak - before < RSS_BUDGET, f"gateway RSS grew {(peak - before) // MiB} MiB"
    finally:
        sandbox.kill()


def test_upload_errors_are_json_for_bad_requests(box: SandboxHttp) -> None:
    """The other refusals of the pipeline: stable 400s, never a 500."""
    directory = _fresh(box, "bad")
    cases: list[tuple[dict[str, str], bytes, str]] = [
        ({"Content-Encoding": "br"}, b"x", "invalid_request"),
        ({"Content-Type": "multipart/form-data"}, b"x", "invalid_request"),  # no boundary
        ({"Content-Type": multipart_content_type()}, b"no boundary line here", "invalid_request"),
        ({"Content-Type": multipart_content_type()}, multipart([]), "invalid_request"),
    ]
    for extra, body, code in cases:
        response = httpx.post(
            f"{box.url}/files",
            params={"path": f"{directory}/keep"},
            content=body,
            headers={**box.headers, "Content-Type": OCTET, **extra},
        )
        assert response.status_code == 400, (extra, response.text)
        assert response.json()["error_code"] == code, (extra, response.json())
    missing_path = httpx.post(
        f"{box.url}/files", content=b"x", headers={**box.headers, "Content-Type": OCTET}
    )
    assert missing_path.status_code == 400, missing_path.text
    _intact(box, directory)
