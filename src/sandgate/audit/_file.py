"""Reading the log file: its head (the last record) and the records after a point.

The log only grows, so its last records sit in its last bytes: both readers work backwards
from the end in chunks and never read a long log whole. A line that is not a JSON object is
reported as ``None`` (the caller decides what that means); nothing here trusts the file.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sandgate.audit.chain import GENESIS

__all__ = ["Head", "file_lines", "read_head", "records_after"]

_CHUNK = 64 * 1024
_FIRST_CHUNK = 4096


@dataclass(frozen=True)
class Head:
    """The file as it is now: identity, size, and its last record's ``seq`` and ``hash``
    (0 and the genesis hash for an empty file; ``seq`` -1 when the last line is unreadable)."""

    inode: int
    size: int
    seq: int
    hash: str


def read_head(fd: int) -> Head:
    """The head of the open log ``fd`` (read with ``pread``; the offset is not moved)."""
    status = os.fstat(fd)
    if status.st_size == 0:
        return Head(status.st_ino, 0, 0, GENESIS)
    last = _last_line(fd, status.st_size)
    record = _parse(last)
    if record is None:
        return Head(status.st_ino, status.st_size, -1, "")
    seq, digest = record.get("seq"), record.get("hash")
    if not isinstance(seq, int) or not isinstance(digest, str):
        return Head(status.st_ino, status.st_size, -1, "")
    return Head(status.st_ino, status.st_size, seq, digest)


def records_after(fd: int, seq: int) -> list[dict[str, Any]] | None:
    """The records from the one numbered ``seq`` (inclusive) to the end, oldest first, read
    backwards from the end; None when a line on the way is unreadable or ``seq`` is never
    reached (the caller then falls back to a full verification)."""
    size = os.fstat(fd).st_size
    found: list[dict[str, Any]] = []
    end = size
    rest = b""
    while end > 0:
        start = max(0, end - _CHUNK)
        chunk = os.pread(fd, end - start, start) + rest
        lines = chunk.split(b"\n")
        rest = lines[0] if start > 0 else b""
        complete = lines[1:] if start > 0 else lines
        for line in reversed(complete):
            if not line.strip():
                continue
            record = _parse(line)
            if record is None:
                return None
            found.append(record)
            if record.get("seq") == seq:
                return list(reversed(found))
        end = start
    return None


def file_lines(path: Path) -> Iterator[str]:
    """Every non-empty line, oldest first (nothing when the file does not exist)."""
    try:
        with path.open(encoding="utf-8", errors="replace") as handle:
            for line in handle:
                if line.strip():
                    yield line.rstrip("\n")
    except FileNotFoundError:
        return


def _last_line(fd: int, size: int) -> bytes:
    end = size
    data = b""
    chunk = _FIRST_CHUNK  # a record is a few hundred bytes: read little, more if needed
    while end > 0:
        start = max(0, end - chunk)
        data = os.pread(fd, end - start, start) + data
        stripped = data.rstrip(b"\n")
        if b"\n" in stripped or start == 0:
            return stripped.rsplit(b"\n", 1)[-1]
        end = start
        chunk = _CHUNK
    return data


def _parse(line: bytes) -> dict[str, Any] | None:
    try:
        value = json.loads(line)
    except ValueError:
        return None
    return value if isinstance(value, dict) else None
