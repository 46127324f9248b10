"""A Unix socket in one sandbox's own directory, served by the gateway (tool calls, egress).

SECURITY: the socket's mode is 0666 because the sandbox's unprivileged users must connect to
it; only that sandbox sees it (its own ``/run/sandgate`` mount), so the socket a connection
arrives on *is* the caller's identity. ``start`` unlinks whatever sits at the path first: a
stale socket, or anything the sandbox planted there (unlink does not follow links, and bind
refuses to reuse a path).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from pathlib import Path

__all__ = ["SandboxListener"]


class SandboxListener:
    """Subclasses implement ``_serve`` (one call per connection, run in its own task) and may
    track those tasks in ``_tasks``, which ``close`` cancels."""

    #: The stream reader's buffer limit for each connection.
    read_limit = 64 * 1024

    def __init__(self) -> None:
        self._server: asyncio.Server | None = None
        self._tasks: set[asyncio.Task[None]] = set()

    async def start(self, path: Path) -> None:
        """Listens on ``path``, replacing whatever is there."""
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)
        self._server = await asyncio.start_unix_server(
            self._serve, path=str(path), limit=self.read_limit
        )
        os.chmod(path, 0o666)  # noqa: S103 - see the module docstring

    async def close(self) -> None:
        """Stops listening and cancels every open connection; idempotent."""
        if self._server is not None:
            self._server.close()
            self._server = None
        for task in list(self._tasks):
            task.cancel()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        raise NotImplementedError
