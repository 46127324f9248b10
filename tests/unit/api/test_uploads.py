"""Pure parts of the upload pipeline: the bounded gzip decoder and the guest-error table (one
status per condition). The pipeline itself is proven end to end in tests/security."""

from __future__ import annotations

import asyncio
import gzip
import os
from collections.abc import AsyncIterator, Iterable

import pytest

from sandgate.api.e2b.guest_rpc import guest_failure
from sandgate.api.e2b.uploads import _Data, _gunzip, _Parts, _PartStart, _target
from sandgate.errors import (
    DiskFull,
    Forbidden,
    InvalidRequest,
    LimitExceeded,
    NotFound,
    QuotaExceeded,
    SandboxUnavailable,
)
from sandgate.guest.client import GuestError, GuestUnavailable
from sandgate.guest.protocol import DISK_FULL, TOO_LARGE

MiB = 1024 * 1024


async def _chunks(data: bytes, size: int) -> AsyncIterator[bytes]:
    for start in range(0, len(data), size):
        yield data[start : start + size]


def _inflate(pieces: AsyncIterator[bytes]) -> list[bytes]:
    async def collect() -> list[bytes]:
        return [piece async for piece in _gunzip(pieces)]

    return asyncio.run(collect())


def test_gunzip_bomb_is_inflated_in_bounded_pieces() -> None:
    bomb = gzip.compress(b"\0" * (64 * MiB), compresslevel=9)
    assert len(bomb) < MiB // 8
    for chunk_size in (len(bomb), 4096, 7):
        pieces = _inflate(_chunks(bomb, chunk_size))
        assert max(len(p) for p in pieces) <= 256 * 1024
        assert sum(len(p) for p in pieces) == 64 * MiB


def test_gunzip_stops_when_the_consumer_stops() -> None:
    """The consumer (the byte counter) raises 413 mid-stream: no more is inflated."""
    inflated = 0

    async def consume() -> None:
        nonlocal inflated
        bomb = gzip.compress(b"\0" * (64 * MiB), compresslevel=9)
        async for piece in _gunzip(_chunks(bomb, 1024)):
            inflated += len(piece)
            if inflated > 8 * MiB:
                return

    asyncio.run(consume())
    assert 8 * MiB < inflated <= 8 * MiB + 256 * 1024


def test_gunzip_members_and_random_data_round_trip() -> None:
    first, second = os.urandom(300_000), b"second member " * 1000
    body = gzip.compress(first) + gzip.compress(second)
    assert b"".join(_inflate(_chunks(body, 65536))) == first + second


@pytest.mark.parametrize(
    "body",
    [
        b"plain text, not gzip",
        gzip.compress(b"x" * 100_000)[:-10],  # truncated
        gzip.compress(b"ok") + b"trailing garbage",
        b"",
    ],
    ids=["not-gzip", "truncated", "trailing-garbage", "empty"],
)
def test_gunzip_invalid_is_400(body: bytes) -> None:
    with pytest.raises(InvalidRequest) as info:
        _inflate(_chunks(body, 5))
    assert info.value.status == 400 and "gzip" in info.value.message


def _failures(errors: Iterable[GuestError]) -> list[tuple[type, int, str]]:
    return [(type(f), f.status, f.code) for f in map(guest_failure, errors)]


def test_guest_failures_map_to_one_status_each() -> None:
    assert _failures(
        [
            GuestError("resource_exhausted", "write /x: not enough disk space", DISK_FULL),
            GuestError("resource_exhausted", "too many file operations"),
            GuestError("invalid_argument", "path is a directory: /x"),
            GuestError("permission_denied", "cannot create /x"),
            GuestError("not_found", "missing"),
            GuestError("invalid_argument", "/proc/x yields more than 16 MiB", TOO_LARGE),
            GuestUnavailable("cannot connect to the guest at /host/path/guest.sock"),
        ]
    ) == [
        (DiskFull, 507, "disk_full"),
        (QuotaExceeded, 429, "quota_exceeded"),
        (InvalidRequest, 400, "invalid_request"),
        (Forbidden, 403, "forbidden"),
        (NotFound, 404, "not_found"),
        (LimitExceeded, 400, "limit_exceeded"),
        (SandboxUnavailable, 502, "sandbox_unavailable"),
    ]
    unreachable = guest_failure(GuestUnavailable("cannot connect to the guest at /host/x.sock"))
    assert "/host" not in unreachable.message  # host paths stay on the host


def test_a_file_part_without_filename_is_the_file_the_query_path_names() -> None:
    """What JS users send with ``FormData.append("file", text)`` to a signed upload URL: a
    plain field, no filename. ``?path`` names its file (as envd); without one, a clear 400."""
    body = b'--B\r\nContent-Disposition: form-data; name="file"\r\n\r\nplain text\r\n--B--\r\n'
    for size in (len(body), 7, 1):  # however the body is cut into chunks
        parts = _Parts(b"B", max_parts=10)
        pieces = [body[start : start + size] for start in range(0, len(body), size)]
        events = [event for piece in pieces for event in parts.feed(piece)]
        assert events[0] == _PartStart("file", None) and parts.done
        assert b"".join(e.data for e in events if isinstance(e, _Data)) == b"plain text"
    assert _target(None, "/home/user/x.txt", 0) == "/home/user/x.txt"
    assert _target("", "/home/user/x.txt", 0) == "/home/user/x.txt"
    with pytest.raises(InvalidRequest) as info:
        _target(None, None, 0)
    assert info.value.status == 400 and "?path" in info.value.message
