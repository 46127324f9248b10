"""Full verification: the chain, every record against its anchored copy, and the checkpoints.

What each kind of tampering looks like, and the record ``verify`` names (``first_bad``):

* an edited record: its hash no longer matches its content → that record;
* an edited record whose hash, and every hash after it, was recomputed: the chain is whole,
  but the record's hash differs from the one the store indexed → that record;
* a removed or reordered record: a line holds another number than the next one expected →
  the first missing number;
* records cut from the end (truncation), or an older copy put back (rollback): the chain is
  whole but shorter than the index (or than a signed checkpoint) → the first missing number;
* truncation followed by new records written in their place: those records' hashes differ
  from the index's → the first rewritten number.

A log may start with an ``audit.recovered`` record (``sandgate audit recover``): the chain then
starts at that record, which must continue the record the store anchored before it.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from typing import Protocol

from sandgate.audit.chain import GENESIS, VerifyResult, link_problem
from sandgate.audit.checkpoint import Checkpoint

__all__ = ["RECOVERED_EVENT", "Index", "verify_log"]

#: The event of the first record of a log started again after damage.
RECOVERED_EVENT = "audit.recovered"
_PAGE = 10_000


class Index(Protocol):
    """The store's copy of every record's hash."""

    def head(self) -> tuple[int, str] | None:
        """(seq, hash) of the last indexed record, None when the index is empty."""
        ...

    def hashes(self, first: int, last: int) -> dict[int, str]:
        """Hashes of the indexed records numbered ``first``..``last``."""
        ...


class _Lookup:
    """Pages through the index as the file is read."""

    def __init__(self, index: Index | None) -> None:
        self._index = index
        self._page: dict[int, str] = {}
        self._first = self._last = 0

    def get(self, seq: int) -> str | None:
        if self._index is None:
            return None
        if not self._first <= seq <= self._last:
            self._first, self._last = seq, seq + _PAGE - 1
            self._page = self._index.hashes(self._first, self._last)
        return self._page.get(seq)


def verify_log(
    lines: Iterable[str],
    index: Index | None,
    checkpoints: Sequence[Checkpoint] = (),
    checkpoint_name: str = "the checkpoint file",
) -> VerifyResult:
    """Checks ``lines`` (the log, oldest first) against ``index`` and ``checkpoints``; stops
    at the first problem and names the first bad record."""
    for point in checkpoints:
        if not point.valid:
            return VerifyResult(
                0,
                GENESIS,
                f"line {point.line} of {checkpoint_name} is not a checkpoint signed with "
                "audit.checkpoint.key_secret (the checkpoint file was altered)",
            )
    signed = {point.seq: point for point in checkpoints}
    # The index's head is read before the file: a writer appending meanwhile only adds lines
    # after it, so a log read afterwards always reaches it unless records really are missing.
    head = index.head() if index is not None else None
    lookup = _Lookup(index)
    notes: list[str] = []
    expected, prev, checked = 1, GENESIS, 0
    for number, line in enumerate(lines, start=1):
        try:
            record = json.loads(line)
            if not isinstance(record, dict):
                raise ValueError("not an object")
        except ValueError:
            return _bad(checked, prev, f"line {number} is not a JSON record", number, expected)
        if number == 1 and record.get("event") == RECOVERED_EVENT:
            seq = record.get("seq")
            if isinstance(seq, int) and seq > 1:
                expected, prev = seq, str(record.get("prev"))
                anchored = lookup.get(seq - 1)
                if index is not None and anchored != prev:
                    return _bad(
                        checked,
                        prev,
                        f"the recovery record {seq} (line 1) does not continue record "
                        f"{seq - 1} as the store anchored it",
                        1,
                        seq,
                    )
                notes.append(
                    f"the log restarts at record {seq} after a recovery at {record.get('time')}"
                    f" (earlier records are in {record.get('damaged_file')})"
                )
        problem = link_problem(record, expected, prev, number)
        if problem is not None:
            return _bad(checked, prev, problem, number, expected, notes)
        digest = str(record["hash"])
        anchored = lookup.get(expected)
        if anchored is not None and anchored != digest:
            return _bad(
                checked,
                prev,
                f"record {expected} (line {number}) is not the record the store anchored: it "
                "was rewritten and the chain after it recomputed, or replaced",
                number,
                expected,
                notes,
            )
        signed_here = signed.get(expected)
        if signed_here is not None and signed_here.hash != digest:
            return _bad(
                checked,
                prev,
                f"record {expected} (line {number}) is not the record the signed checkpoint of "
                f"{signed_here.time} holds",
                number,
                expected,
                notes,
            )
        prev, checked, expected = digest, checked + 1, expected + 1
    last = expected - 1
    if head is not None and head[0] > last:
        return _bad(
            checked,
            prev,
            f"records {last + 1}..{head[0]} are missing from the end of the log (truncated or "
            "rolled back): the store's index still anchors them",
            None,
            last + 1,
            notes,
        )
    top = max(signed.values(), key=lambda p: p.seq, default=None)
    if top is not None and top.seq > last:
        return _bad(
            checked,
            prev,
            f"records {last + 1}..{top.seq} are missing from the end of the log (truncated or "
            f"rolled back): the signed checkpoint of {top.time} covers record {top.seq}",
            None,
            last + 1,
            notes,
        )
    if head is not None and head[0] < last:
        notes.append(f"records {head[0] + 1}..{last} are not yet in the store's index")
    return VerifyResult(checked, prev, notes=tuple(notes))


def _bad(
    checked: int,
    prev: str,
    problem: str,
    line: int | None,
    first_bad: int,
    notes: Sequence[str] = (),
) -> VerifyResult:
    return VerifyResult(checked, prev, problem, line, first_bad, tuple(notes))
