"""The one TLS context of the gateway's outbound HTTP requests (``http`` tools, ``http_fetch``,
approval webhooks).

httpx loads its CA bundle into a new ``SSLContext`` for every client it builds, ~80 ms of CPU
on a small VM; those requests built a client per call, so each call paid it, the tools' on
the event loop, stalling every sandbox's traffic meanwhile. One context, made once as httpx
makes its default one (certifi's roots, the environment not consulted, as those clients set
``trust_env=False``), serves them all: a context is shared by every connection of a client
anyway, and is safe to use from several threads.
"""

from __future__ import annotations

import asyncio
import ssl
import threading

import httpx

__all__ = ["outbound_context", "outbound_context_async"]

_lock = threading.Lock()
_context: ssl.SSLContext | None = None


def outbound_context() -> ssl.SSLContext:
    """The shared context, made at the first call (which blocks for it)."""
    global _context
    with _lock:
        if _context is None:
            _context = httpx.create_ssl_context(trust_env=False)
        return _context


async def outbound_context_async() -> ssl.SSLContext:
    """The shared context; the first call makes it on a worker thread, off the event loop."""
    context = _context
    if context is None:
        context = await asyncio.to_thread(outbound_context)
    return context
