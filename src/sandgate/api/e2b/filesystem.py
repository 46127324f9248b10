"""envd's ``filesystem.Filesystem`` service, translated onto the guest protocol.

SECURITY: the gateway never touches a sandbox's files itself; every path is sent to the guest,
which resolves it and acts as the selected user inside the sandbox. Symlinks, ``..`` and
special files are therefore judged by the sandbox's own kernel view, never the host's.
Only cheap syntactic checks (NUL bytes, length) are made here, so bad input fails fast.
"""

from __future__ import annotations

import asyncio
import contextlib
import secrets
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from starlette.requests import Request
from starlette.responses import Response

from sandgate.api.e2b import messages
from sandgate.api.e2b.connect import (
    RpcError,
    read_stream_request,
    stream_response,
    with_keepalive,
)
from sandgate.api.e2b.guest_rpc import guest_of, stream_failure, unary_call
from sandgate.api.e2b.process import keepalive_interval, timeout_ms
from sandgate.api.e2b.users import request_user
from sandgate.guest.client import (
    EntryInfo,
    FsEvent,
    GuestClient,
    GuestError,
    WatchStream,
)

__all__ = ["FILESYSTEM_METHODS", "check_path", "entry_json"]

MAX_PATH_BYTES = 4096
_TYPES = {"file": "FILE_TYPE_FILE", "dir": "FILE_TYPE_DIRECTORY"}
_EVENTS = {
    "create": "EVENT_TYPE_CREATE",
    "write": "EVENT_TYPE_WRITE",
    "remove": "EVENT_TYPE_REMOVE",
    "rename": "EVENT_TYPE_RENAME",
    "chmod": "EVENT_TYPE_CHMOD",
}
_ENTRY_EVENTS = {"create", "write", "chmod"}
_KEEPALIVE: dict[str, Any] = {"keepalive": {}}
#: Events kept per polling watcher (Python's sync SDK) between two polls.
_WATCHER_BUFFER = 10_000
_MAX_WATCHERS = 64
#: Longest a poll waits for the guest to report what it has queued (it answers at once unless
#: the sandbox is frozen or gone; the poll then answers with what it has).
_SYNC_WAIT_S = 5.0
_FIRST_EVENT_WAIT_S = 0.05
_MORE_EVENTS_WAIT_S = 0.005


def check_path(value: Any, name: str = "path") -> str:
    if value is None:
        return ""
    if not isinstance(value, str):
        raise RpcError("invalid_argument", f"{name} must be a string")
    if "\x00" in value:
        raise RpcError("invalid_argument", f"{name} contains a NUL byte")
    if len(value.encode()) > MAX_PATH_BYTES:
        raise RpcError("invalid_argument", f"{name} is longer than {MAX_PATH_BYTES} bytes")
    return value


def _time(value: float) -> str:
    return datetime.fromtimestamp(value, UTC).isoformat().replace("+00:00", "Z")


def entry_json(entry: EntryInfo) -> dict[str, Any]:
    """A guest entry as proto3 JSON ``EntryInfo``."""
    result: dict[str, Any] = {
        "name": entry.name,
        "type": _TYPES.get(entry.type, "FILE_TYPE_UNSPECIFIED"),
        "path": entry.path,
        "size": str(entry.size),
        "mode": entry.mode,
        "permissions": entry.permissions,
        "owner": entry.owner,
        "group": entry.group,
        "modifiedTime": _time(entry.modified_time),
    }
    if entry.symlink_target:
        result["symlinkTarget"] = entry.symlink_target
    if entry.metadata:
        result["metadata"] = entry.metadata
    return result


def _watchers(request: Request) -> dict[str, _Watcher]:
    route = request.scope["sandgate.route"]
    watchers: dict[str, _Watcher] = route.state.setdefault("watchers", {})
    return watchers


@dataclass
class _Watcher:
    """A watch kept open by the gateway for clients that poll (CreateWatcher)."""

    stream: WatchStream
    entries: _EntryLookup | None
    events: list[dict[str, Any]] = field(default_factory=list)
    arrived: asyncio.Event = field(default_factory=asyncio.Event)
    task: asyncio.Task[None] | None = None
    error: RpcError | None = None

    async def pump(self) -> None:
        try:
            async for event in self.stream:
                if len(self.events) < _WATCHER_BUFFER:
                    self.events.append(await _event(event, self.entries))
                self.arrived.set()
        except GuestError as exc:
            self.error = RpcError(exc.connect, exc.message)


@dataclass(frozen=True)
class _EntryLookup:
    """Finds the entry of an event's file, for watches that asked for ``includeEntry``."""

    guest: GuestClient
    root: str
    user: str | None

    async def __call__(self, name: str) -> EntryInfo | None:
        try:
            return await self.guest.stat(f"{self.root.rstrip('/')}/{name}", user=self.user)
        except GuestError:
            return None  # best effort: the file may already be gone


async def _event(event: FsEvent, entries: _EntryLookup | None) -> dict[str, Any]:
    body: dict[str, Any] = {
        "name": event.name,
        "type": _EVENTS.get(event.type, "EVENT_TYPE_UNSPECIFIED"),
    }
    if entries is not None and event.type in _ENTRY_EVENTS:
        entry = await entries(event.name)
        if entry is not None:
            body["entry"] = entry_json(entry)
    return body


async def stat(request: Request) -> Response:
    async def call(m: dict[str, Any]) -> dict[str, Any]:
        entry = await guest_of(request).stat(check_path(m.get("path")), user=request_user(request))
        return {"entry": entry_json(entry)}

    return await unary_call(request, call)


async def make_dir(request: Request) -> Response:
    async def call(m: dict[str, Any]) -> dict[str, Any]:
        entry = await guest_of(request).make_dir(
            check_path(m.get("path")), user=request_user(request)
        )
        return {"entry": entry_json(entry)}

    return await unary_call(request, call)


async def move(request: Request) -> Response:
    async def call(m: dict[str, Any]) -> dict[str, Any]:
        entry = await guest_of(request).move(
            check_path(m.get("source"), "source"),
            check_path(m.get("destination"), "destination"),
            user=request_user(request),
        )
        return {"entry": entry_json(entry)}

    return await unary_call(request, call)


async def list_dir(request: Request) -> Response:
    async def call(m: dict[str, Any]) -> dict[str, Any]:
        depth = messages.integer(m, "depth") or 1  # proto3: 0 and unset both mean 1
        entries = await guest_of(request).list_dir(
            check_path(m.get("path")), depth=depth, user=request_user(request)
        )
        return {"entries": [entry_json(e) for e in entries]}

    return await unary_call(request, call)


async def remove(request: Request) -> Response:
    async def call(m: dict[str, Any]) -> None:
        await guest_of(request).remove(check_path(m.get("path")), user=request_user(request))

    return await unary_call(request, call)


def _watch_args(m: dict[str, Any]) -> tuple[str, bool, bool]:
    path = check_path(m.get("path"))
    recursive = messages.boolean(m, "recursive")
    include_entry = messages.boolean(m, "includeEntry", "include_entry")
    return path, recursive, include_entry


async def watch_dir(request: Request) -> Response:
    message = await read_stream_request(request)
    path, recursive, include_entry = _watch_args(message)
    user = request_user(request)
    try:
        root = (await guest_of(request).stat(path, user=user)).path
        stream = await guest_of(request).watch(path, recursive=recursive, user=user)
    except GuestError as exc:
        raise RpcError(exc.connect, exc.message) from None

    entries = _EntryLookup(guest_of(request), root, user) if include_entry else None

    async def events() -> AsyncIterator[dict[str, Any]]:
        yield {"start": {}}
        try:
            async for event in stream:
                yield {"filesystem": await _event(event, entries)}
        except GuestError as exc:
            raise await stream_failure(request, exc) from None
        finally:
            await stream.aclose()

    return stream_response(
        with_keepalive(
            events(), keepalive_interval(request), _KEEPALIVE, deadline_ms=timeout_ms(request)
        )
    )


async def create_watcher(request: Request) -> Response:
    async def call(m: dict[str, Any]) -> dict[str, Any]:
        path, recursive, include_entry = _watch_args(m)
        watchers = _watchers(request)
        if len(watchers) >= _MAX_WATCHERS:
            raise RpcError("resource_exhausted", f"at most {_MAX_WATCHERS} watchers per sandbox")
        user = request_user(request)
        guest = guest_of(request)
        root = (await guest.stat(path, user=user)).path
        stream = await guest.watch(path, recursive=recursive, user=user)
        watcher = _Watcher(stream, _EntryLookup(guest, root, user) if include_entry else None)
        watcher.task = asyncio.create_task(watcher.pump())
        watcher_id = secrets.token_hex(8)
        watchers[watcher_id] = watcher
        return {"watcherId": watcher_id}

    return await unary_call(request, call)


def _watcher(request: Request, m: dict[str, Any]) -> tuple[str, _Watcher]:
    watcher_id = messages.string(m, "watcherId", "watcher_id") or ""
    watcher = _watchers(request).get(watcher_id)
    if watcher is None:
        raise RpcError("not_found", f"watcher {watcher_id[:64]!r} not found")
    return watcher_id, watcher


async def get_watcher_events(request: Request) -> Response:
    async def call(m: dict[str, Any]) -> dict[str, Any]:
        _, watcher = _watcher(request, m)
        # Events of a write that just returned may still be on their way from the guest: a
        # sync brings every event the kernel queued before it (clients count a write's events
        # right after it). A guest too old to sync gets a short, bounded moment instead.
        if not await watcher.stream.sync(_SYNC_WAIT_S):
            if not watcher.events:
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(_FIRST_EVENT_WAIT_S):
                        await watcher.arrived.wait()
            await asyncio.sleep(_MORE_EVENTS_WAIT_S)
        watcher.arrived.clear()
        events, watcher.events = watcher.events, []
        if not events and watcher.error is not None:
            raise watcher.error
        return {"events": events}

    return await unary_call(request, call)


async def remove_watcher(request: Request) -> Response:
    async def call(m: dict[str, Any]) -> None:
        watcher_id, watcher = _watcher(request, m)
        _watchers(request).pop(watcher_id, None)
        if watcher.task is not None:
            watcher.task.cancel()
        await watcher.stream.aclose()

    return await unary_call(request, call)


FILESYSTEM_METHODS: dict[str, Callable[[Request], Awaitable[Response]]] = {
    "Stat": stat,
    "MakeDir": make_dir,
    "Move": move,
    "ListDir": list_dir,
    "Remove": remove,
    "WatchDir": watch_dir,
    "CreateWatcher": create_watcher,
    "GetWatcherEvents": get_watcher_events,
    "RemoveWatcher": remove_watcher,
}
