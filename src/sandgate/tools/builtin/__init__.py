"""Tools shipped with Sandgate: ``kv`` and ``http_fetch``."""

from sandgate.tools.builtin import http_fetch, kv

__all__ = ["http_fetch", "kv"]
