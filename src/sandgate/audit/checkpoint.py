"""Signed checkpoints: a copy of the log's head kept somewhere else, which nobody without the
key can forge.

The store's index is the first anchor, but it lives on the same machine as the log: someone
who restores an old copy of *both* the log and the database rolls history back unseen. A
checkpoint file on other storage (a different volume, a mount that only appends, a directory
another team backs up) closes that: every ``every_records`` records or ``every_s`` seconds,
whichever comes first, the writer appends one line ``{"seq", "hash", "time", "sig"}`` where
``sig`` is HMAC-SHA256 over the canonical JSON of the other three, keyed by a secret from
``secrets:`` (``audit.checkpoint.key_secret``). ``verify`` (and the start-up check) then
require the log to contain every checkpointed record with that hash, and refuse a checkpoint
whose signature does not match.

Trust: the key is the asset. A reader with the checkpoint file but not the key learns only
hashes; a writer without the key cannot add a checkpoint that verifies. Whoever holds the key
and both copies can still rewrite everything: keep the key out of the gateway's home.
"""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import json
import os
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from sandgate.audit.chain import canonical

__all__ = ["Checkpoint", "Checkpointer", "read_checkpoints"]


@dataclass(frozen=True)
class Checkpoint:
    """One line of the checkpoint file; ``valid`` is False when its signature is wrong."""

    line: int
    seq: int
    hash: str
    time: str
    valid: bool


def _sign(key: bytes, seq: int, digest: str, at: str) -> str:
    body = canonical({"seq": seq, "hash": digest, "time": at})
    return hmac.new(key, body.encode(), hashlib.sha256).hexdigest()


class Checkpointer:
    """Decides when a checkpoint is due and appends it (called by the writer thread only)."""

    def __init__(self, path: Path, key: bytes, every_records: int, every_s: float) -> None:
        self.path = path
        self.key = key
        self._every_records = every_records
        self._every_s = every_s
        self._last_seq: int | None = None
        self._last_time = 0.0

    def settings(self) -> dict[str, Any]:
        """What another process needs to write the same checkpoints (the writer process)."""
        return {
            "path": str(self.path),
            "key": self.key.hex(),
            "every_records": self._every_records,
            "every_s": self._every_s,
        }

    def due(self, seq: int) -> bool:
        if self._last_seq is None:
            last = read_checkpoints(self.path, self.key)
            self._last_seq = last[-1].seq if last else 0
        return seq - self._last_seq >= self._every_records or (
            seq > self._last_seq and time.monotonic() - self._last_time >= self._every_s
        )

    def write(self, seq: int, digest: str) -> None:
        """Appends a signed checkpoint of record ``seq`` and makes it durable; raises
        ``OSError``."""
        at = datetime.now(UTC).isoformat()
        line = canonical(
            {"seq": seq, "hash": digest, "time": at, "sig": _sign(self.key, seq, digest, at)}
        )
        self.path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        try:
            os.write(fd, (line + "\n").encode())
            os.fsync(fd)
        finally:
            os.close(fd)
        self._last_seq = seq
        self._last_time = time.monotonic()


def read_checkpoints(path: Path, key: bytes) -> list[Checkpoint]:
    """Every checkpoint in ``path`` (none when it does not exist), oldest first."""
    found: list[Checkpoint] = []
    with (
        contextlib.suppress(FileNotFoundError),
        path.open(encoding="utf-8", errors="replace") as handle,
    ):
        for number, text in enumerate(handle, start=1):
            if not text.strip():
                continue
            try:
                data = json.loads(text)
                seq, digest, at, sig = data["seq"], data["hash"], data["time"], data["sig"]
                if not isinstance(seq, int) or not all(
                    isinstance(v, str) for v in (digest, at, sig)
                ):
                    raise TypeError
            except (ValueError, KeyError, TypeError):
                found.append(Checkpoint(number, -1, "", "", False))
                continue
            valid = hmac.compare_digest(sig, _sign(key, seq, digest, at))
            found.append(Checkpoint(number, seq, digest, at, valid))
    return found
