"""Bounded reading of a tool's output (GW-13): keep the first ``limit`` bytes, drain the rest."""

from __future__ import annotations

import asyncio

TRUNCATION_MARKER = "\n[sandgate: output truncated at {limit} bytes]"
_CHUNK = 64 * 1024


async def read_bounded(stream: asyncio.StreamReader, limit: int) -> tuple[bytes, bool]:
    """Reads ``stream`` to EOF keeping at most ``limit`` bytes; returns (kept, truncated)."""
    kept = bytearray()
    truncated = False
    while chunk := await stream.read(_CHUNK):
        room = limit - len(kept)
        if len(chunk) > room:
            truncated = True
        if room > 0:
            kept.extend(chunk[:room])
    return bytes(kept), truncated
