"""Canonical tool names (GW-02).

A name from a sandbox is NFKC-normalised (fullwidth letters become ASCII), lowercased, and
``-`` becomes ``_``; what remains must be a plain identifier. Anything else (spaces,
zero-width characters, ``../``, ``ns/``) is not a tool name at all, so the call is denied by
default; it is never matched loosely against a real tool.
"""

from __future__ import annotations

import unicodedata

from sandgate.config._gateway import TOOL_NAME

__all__ = ["canonical_name"]


def canonical_name(raw: object) -> str | None:
    """The canonical form of ``raw``, or None when it cannot name a tool."""
    if not isinstance(raw, str) or len(raw) > 200:
        return None
    name = unicodedata.normalize("NFKC", raw).lower().replace("-", "_")
    return name if TOOL_NAME.fullmatch(name) else None
