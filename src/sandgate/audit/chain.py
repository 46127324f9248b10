"""The hash chain: how a record is sealed and how a sequence of lines is checked.

Each record carries ``seq`` (1, 2, 3, ...), ``prev`` (the previous record's hash; 64 zeros for
the first) and ``hash`` = SHA-256 of ``prev`` + the canonical JSON of the record without its
``hash``. Editing a record breaks its hash; removing one breaks the next ``seq`` and ``prev``;
reordering breaks both. Removing records from the *end* leaves a valid shorter chain, which is
why the store keeps a second copy of every hash (``AuditLog.verify`` compares them).

Canonical JSON is sorted, compact and ASCII-only, so control characters and ANSI escapes in
arguments are escaped and one record is always exactly one line (GW-10).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

__all__ = ["GENESIS", "VerifyResult", "canonical", "seal", "verify_lines"]

GENESIS = "0" * 64


def canonical(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=True)


def _digest(prev: str, body: dict[str, Any]) -> str:
    return hashlib.sha256((prev + canonical(body)).encode()).hexdigest()


def seal(record: dict[str, Any], seq: int, prev: str) -> dict[str, Any]:
    """The record with ``seq``, ``prev`` and its ``hash`` set."""
    body = {k: v for k, v in record.items() if k != "hash"}
    body["seq"] = seq
    body["prev"] = prev
    return {**body, "hash": _digest(prev, body)}


@dataclass(frozen=True)
class VerifyResult:
    """``checked`` records were intact; ``problem`` names the first bad one, if any."""

    checked: int
    last_hash: str
    problem: str | None = None
    bad_line: int | None = None

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
            return VerifyResult(checked, prev, f"line {number} is not a JSON record", number)
        seq = record.get("seq")
        if seq != checked + 1:
            return VerifyResult(
                checked,
                prev,
                f"line {number}: record seq {seq} where {checked + 1} was expected "
                "(a record was removed, inserted or reordered)",
                number,
            )
        if record.get("prev") != prev:
            return VerifyResult(
                checked,
                prev,
                f"record {seq} (line {number}) does not follow record {seq - 1}",
                number,
            )
        body = {k: v for k, v in record.items() if k != "hash"}
        if record.get("hash") != _digest(prev, body):
            return VerifyResult(
                checked, prev, f"record {seq} (line {number}) was modified: hash mismatch", number
            )
        prev = record["hash"]
        checked += 1
    return VerifyResult(checked, prev)
