"""The hash chain: how a record is sealed and how a sequence of lines is checked.

Each record carries ``seq`` (1, 2, 3, ...), ``prev`` (the previous record's hash; 64 zeros for
the first) and ``hash`` = SHA-256 of ``prev`` + the canonical JSON of the record without its
``hash``. Editing a record breaks its hash; removing one breaks the next ``seq`` and ``prev``;
reordering breaks both. The chain is not keyed, so whoever can write the file can also cut
records from the end or rewrite a record and recompute every hash after it: that is why the
head is anchored outside the file (the store keeps every record's hash, and an optional
signed checkpoint file a copy of the head; ``audit.verify`` compares them all).

Canonical JSON is sorted, compact and ASCII-only, so control characters and ANSI escapes in
arguments are escaped and one record is always exactly one line (GW-10).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

__all__ = [
    "GENESIS",
    "VerifyResult",
    "canonical",
    "link_problem",
    "linked",
    "seal",
    "verify_lines",
]

GENESIS = "0" * 64


def canonical(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=True)


def _digest(prev: str, body: dict[str, Any]) -> str:
    return hashlib.sha256((prev + canonical(body)).encode()).hexdigest()


def seal(record: dict[str, Any], seq: int, prev: str) -> dict[str, Any]:
    """The record with ``seq``, ``prev`` and its ``hash`` set."""
    body = _body(record, seq, prev)
    return {**body, "hash": _digest(prev, body)}


def linked(record: dict[str, Any], seq: int, prev: str, digest: str) -> dict[str, Any]:
    """The record as ``seal`` made it elsewhere (the writer process), given its link."""
    return {**_body(record, seq, prev), "hash": digest}


def _body(record: dict[str, Any], seq: int, prev: str) -> dict[str, Any]:
    body = {k: v for k, v in record.items() if k != "hash"}
    body["seq"] = seq
    body["prev"] = prev
    return body


@dataclass(frozen=True)
class VerifyResult:
    """``checked`` records were intact; ``problem`` says what is wrong, ``first_bad`` is the
    number (``seq``) of the first record that is missing or not as written, ``bad_line`` the
    line of the file where that showed. ``notes`` are facts worth showing that are not
    damage (a recovery, records not yet indexed)."""

    checked: int
    last_hash: str
    problem: str | None = None
    bad_line: int | None = None
    first_bad: int | None = None
    notes: tuple[str, ...] = ()

    @property
    def ok(self) -> bool:
        return self.problem is None


def verify_lines(lines: Iterable[str]) -> VerifyResult:
    """Checks a chain from its first line; stops at the first broken record."""
    prev = GENESIS
    checked = 0
    for number, line in enumerate(lines, start=1):
        try:
            record = json.loads(line)
            if not isinstance(record, dict):
                raise ValueError("not an object")
        except ValueError:
            return VerifyResult(
                checked, prev, f"line {number} is not a JSON record", number, checked + 1
            )
        problem = link_problem(record, checked + 1, prev, number)
        if problem is not None:
            return VerifyResult(checked, prev, problem, number, checked + 1)
        prev = record["hash"]
        checked += 1
    return VerifyResult(checked, prev)


def link_problem(record: dict[str, Any], expected: int, prev: str, line: int) -> str | None:
    """Why ``record`` (on ``line``) is not record ``expected`` following hash ``prev``, or
    None when it is."""
    seq = record.get("seq")
    if seq != expected:
        if isinstance(seq, int) and seq > expected:
            return (
                f"record {expected} is missing: line {line} holds record {seq} "
                "(records were removed or reordered)"
            )
        return (
            f"record {expected} is missing: line {line} holds record {seq!r} "
            "(records were inserted, duplicated or reordered)"
        )
    if record.get("prev") != prev:
        return f"record {seq} (line {line}) does not follow record {expected - 1}"
    body = {k: v for k, v in record.items() if k != "hash"}
    if record.get("hash") != _digest(prev, body):
        return f"record {seq} (line {line}) was modified: its hash does not match its content"
    return None
