"""The gateway's async client for the guest daemon (stdlib only; never imported by the guest).

Every call opens one connection to ``guest.sock``, writes one request frame and reads the
answer; streams (process output, file reads, watches, tunnels) keep their connection until
they end or are closed. Errors (defined in ``sandgate.errors``, re-exported here)::

    GuestError(code, message)      the guest answered {"ok": false, ...}; ``connect`` is the
     │                             protocol error code (Connect-RPC name), ``code`` and
     │                             ``status`` those of the Sandgate error it stands for
     └── GuestUnavailable          no usable connection: socket missing, refused, reset, or
                                   closed before the answer (Connect code "unavailable")

Cancellation: cancelling a call, or closing/abandoning a stream (``aclose``), closes its
connection; the guest treats that as "stop streaming", never as "stop the work" (a process
keeps running).
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import os
from collections.abc import AsyncIterable, AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any, Literal, NoReturn, Self

# The error classes live in the gateway's one error tree; this module ships in the guest's
# zipapp, which never imports it, so the gateway package is only needed where it runs.
from sandgate.errors import GuestError, GuestUnavailable

from .protocol import (
    FRAME_HEADER,
    MAX_FRAME,
    MAX_TUNNEL_WAIT_S,
    Kind,
    decode_json,
    encode_frame,
    encode_json,
)

__all__ = [
    "Ended",
    "EntryInfo",
    "FileReader",
    "FileUpload",
    "FsEvent",
    "GuestClient",
    "GuestError",
    "GuestUnavailable",
    "Output",
    "ProcessEvent",
    "ProcessInfo",
    "ProcessStream",
    "Started",
    "WatchStream",
]

_UPLOAD_CHUNK = 1024 * 1024
#: How long an abandoned upload waits for the guest to remove what it staged.
_ABORT_WAIT_S = 5.0
_READ_LIMIT = MAX_FRAME + FRAME_HEADER.size
_CONNECTION_ERRORS = (OSError, asyncio.IncompleteReadError, EOFError)


@dataclass(frozen=True)
class Started:
    pid: int


@dataclass(frozen=True)
class Output:
    stream: Literal["stdout", "stderr", "pty"]
    data: bytes


@dataclass(frozen=True)
class Ended:
    exit_code: int
    exited: bool
    status: str
    error: str | None
    timed_out: bool


ProcessEvent = Started | Output | Ended


@dataclass(frozen=True)
class ProcessInfo:
    pid: int
    tag: str | None
    cmd: str
    args: list[str]
    envs: dict[str, str]
    cwd: str
    pty: bool


@dataclass(frozen=True)
class EntryInfo:
    """A file as the guest saw it. ``type`` is ``file``, ``dir`` or ``unspecified`` (broken
    symlink, FIFO, socket, device); for a symlink, ``type`` and ``mode`` describe the target."""

    name: str
    type: str
    path: str
    size: int
    mode: int
    permissions: str
    owner: str
    group: str
    modified_time: float
    symlink_target: str | None = None
    metadata: dict[str, str] = field(default_factory=dict)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> EntryInfo:
        return cls(
            name=data["name"],
            type=data["type"],
            path=data["path"],
            size=data["size"],
            mode=data["mode"],
            permissions=data["permissions"],
            owner=data["owner"],
            group=data["group"],
            modified_time=data["modified_time"],
            symlink_target=data.get("symlink_target"),
            metadata=dict(data.get("metadata") or {}),
        )


@dataclass(frozen=True)
class FsEvent:
    """``name`` is relative to the watched directory; ``type`` is ``create``, ``write``,
    ``remove``, ``rename`` or ``chmod``."""

    name: str
    type: str


_STREAM_NAMES: dict[int, Literal["stdout", "stderr", "pty"]] = {
    Kind.STDOUT: "stdout",
    Kind.STDERR: "stderr",
    Kind.PTY: "pty",
}


class _Connection:
    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader = reader
        self.writer = writer

    @classmethod
    async def open(cls, path: str, request: dict[str, Any]) -> _Connection:
        try:
            reader, writer = await asyncio.open_unix_connection(path, limit=_READ_LIMIT)
        except OSError as exc:
            raise GuestUnavailable(f"cannot connect to the guest at {path}: {exc}") from exc
        conn = cls(reader, writer)
        try:
            writer.write(encode_json(request))
        except OSError as exc:
            conn.close()
            raise GuestUnavailable(f"guest connection failed: {exc}") from exc
        return conn

    async def read_frame(self) -> tuple[int, bytes]:
        """The next frame; ``GuestUnavailable`` if the guest closed or sent garbage."""
        try:
            kind, length = FRAME_HEADER.unpack(await self.reader.readexactly(FRAME_HEADER.size))
            if length > MAX_FRAME or kind > Kind.EOF:
                raise GuestUnavailable(f"malformed frame from the guest (kind {kind})")
            payload = await self.reader.readexactly(length) if length else b""
        except _CONNECTION_ERRORS as exc:
            raise GuestUnavailable(f"guest closed the connection: {exc!r}") from exc
        return kind, payload

    async def read_json(self) -> dict[str, Any]:
        kind, payload = await self.read_frame()
        if kind != Kind.JSON:
            raise GuestUnavailable(f"expected a JSON frame from the guest, got kind {kind}")
        try:
            return decode_json(payload)
        except ValueError as exc:
            raise GuestUnavailable(f"malformed JSON from the guest: {exc}") from exc

    async def read_reply(self) -> dict[str, Any]:
        """The next JSON frame, raising :class:`GuestError` if it is an error reply."""
        message = await self.read_json()
        if message.get("ok") is False:
            reason = message.get("reason")
            raise GuestError(
                str(message.get("code", "internal")),
                str(message.get("message", "")),
                reason if isinstance(reason, str) else None,
            )
        return message

    def close(self) -> None:
        self.writer.transport.abort()


#: How long a one-shot call waits for the guest's answer. The guest answers unary calls at
#: once (file operations stream instead); a guest that does not answer in this time is
#: unreachable, and the caller gets a clear error instead of a hang.
UNARY_TIMEOUT_S = 30.0


#: A recursive remove of a big tree is the one unary call that may take long.
_REMOVE_TIMEOUT_S = 600.0


async def _unary(
    opened: Awaitable[_Connection], timeout_s: float | None = UNARY_TIMEOUT_S
) -> dict[str, Any]:
    """One request, one answer. ``timeout_s=None`` waits as long as the guest works on it
    (stdin writes wait for the process to read: that is backpressure, not a hang)."""
    conn = await opened
    try:
        async with asyncio.timeout(timeout_s):
            return await conn.read_reply()
    except TimeoutError:
        raise GuestUnavailable(
            f"the sandbox's guest did not answer within {timeout_s:g}s"
        ) from None
    finally:
        conn.close()


class _OpenConnection:
    """A stream that owns one guest connection: ``aclose`` (or leaving ``async with``) closes
    it, which only unsubscribes; the work in the sandbox goes on."""

    _conn: _Connection | None

    async def aclose(self) -> None:
        """Closes the connection; idempotent."""
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()


class ProcessStream(_OpenConnection):
    """The events of one process: :class:`Started` first, then :class:`Output`, then exactly
    one :class:`Ended`. Closing the stream leaves the process running."""

    def __init__(self, conn: _Connection, pid: int) -> None:
        self.pid = pid
        self._conn: _Connection | None = conn
        self._started_sent = False

    def __aiter__(self) -> Self:
        return self

    async def __anext__(self) -> ProcessEvent:
        if not self._started_sent:
            self._started_sent = True
            return Started(self.pid)
        conn = self._conn
        if conn is None:
            raise StopAsyncIteration
        try:
            while True:
                kind, payload = await conn.read_frame()
                stream = _STREAM_NAMES.get(kind)
                if stream is not None:
                    return Output(stream, payload)
                if kind != Kind.JSON:
                    continue
                message = decode_json(payload)
                if message.get("ev") == "end":
                    await self.aclose()
                    return Ended(
                        exit_code=int(message["exit_code"]),
                        exited=bool(message["exited"]),
                        status=str(message["status"]),
                        error=message.get("error"),
                        timed_out=bool(message.get("timed_out", False)),
                    )
        except GuestUnavailable:
            await self.aclose()
            raise GuestUnavailable(
                f"process {self.pid}: stream ended without an end event"
            ) from None
        except BaseException:
            await self.aclose()
            raise


class FileReader(_OpenConnection):
    """A file being read: ``size`` (whole file), ``offset`` and ``length`` (bytes that follow)
    are known up front; iterate for the data chunks (each at most 1 MiB)."""

    def __init__(self, conn: _Connection, header: dict[str, Any]) -> None:
        self.size = int(header["size"])
        self.name = str(header.get("name", ""))
        self.offset = int(header.get("offset", 0))
        self.length = int(header.get("length", self.size))
        self._conn: _Connection | None = conn

    def __aiter__(self) -> Self:
        return self

    async def __anext__(self) -> bytes:
        conn = self._conn
        if conn is None:
            raise StopAsyncIteration
        try:
            kind, payload = await conn.read_frame()
        except BaseException:
            await self.aclose()
            raise
        if kind == Kind.DATA:
            return payload
        await self.aclose()
        if kind == Kind.EOF:
            raise StopAsyncIteration
        raise GuestUnavailable(f"unexpected frame kind {kind} in a file read")

    async def read_all(self) -> bytes:
        return b"".join([chunk async for chunk in self])


class FileUpload(_OpenConnection):
    """Files uploaded together (``write_files``): ``begin`` a file, ``write`` its bytes,
    ``end`` it, repeat; ``commit`` puts them all in place and returns their entries.

    The bytes go straight to a temp file beside each target inside the sandbox, nothing is
    kept here beyond the frame being sent. Until the commit no target changes: closing the
    upload first (``aclose``, leaving ``async with``, cancellation) makes the guest remove
    everything it staged, and ``aclose`` waits (briefly) until it has. The guest answers
    before the commit only to refuse (disk full, permission, bad path); every method raises
    that :class:`GuestError` as soon as it is known.
    """

    def __init__(self, conn: _Connection) -> None:
        self._conn: _Connection | None = conn
        self._reply = asyncio.ensure_future(conn.read_reply())

    async def begin(self, path: str) -> None:
        await self._send(encode_json({"path": path}))

    async def write(self, data: bytes) -> None:
        if not data:
            return
        if len(data) <= MAX_FRAME:
            await self._send(encode_frame(Kind.DATA, data))
            return
        view = memoryview(data)
        for start in range(0, len(view), MAX_FRAME):
            await self._send(encode_frame(Kind.DATA, bytes(view[start : start + MAX_FRAME])))

    async def end(self) -> None:
        await self._send(encode_frame(Kind.EOF))

    async def commit(self) -> list[EntryInfo]:
        await self._send(encode_json({"commit": True}))
        try:
            reply = await self._reply
        finally:
            await self.aclose()
        return [EntryInfo.from_json(e) for e in reply["entries"]]

    async def aclose(self) -> None:
        """Abandons the upload unless it was committed; idempotent."""
        conn = self._conn
        if conn is None:
            return
        self._conn = None
        try:
            if not self._reply.done():
                # A half-close is "no more files": the guest removes what it staged, then
                # closes, which ends the reply.
                with contextlib.suppress(OSError, RuntimeError):
                    conn.writer.write_eof()
                with contextlib.suppress(GuestError, TimeoutError):
                    async with asyncio.timeout(_ABORT_WAIT_S):
                        await asyncio.shield(self._reply)
        finally:
            if self._reply.done() and not self._reply.cancelled():
                self._reply.exception()  # retrieved: raised already, or moot after an abort
            self._reply.cancel()
            conn.close()

    async def _send(self, frame: bytes) -> None:
        conn = self._conn
        if conn is None:
            raise GuestUnavailable("the upload is closed")
        if self._reply.done():
            await self._refused()
        try:
            conn.writer.write(frame)
            await conn.writer.drain()
        except OSError:
            await self._refused()  # the guest stopped reading: its answer says why

    async def _refused(self) -> NoReturn:
        try:
            reply = await self._reply
        finally:
            await self.aclose()
        raise GuestUnavailable(f"the guest answered before the upload ended: {reply!r}")


class WatchStream(_OpenConnection):
    """File system events under a watched directory until closed.

    :meth:`sync` (when ``can_sync``) waits until every event the kernel queued before the
    call has been iterated; it needs another task iterating the stream meanwhile.
    """

    def __init__(self, conn: _Connection, *, can_sync: bool = False) -> None:
        self._conn: _Connection | None = conn
        self.can_sync = can_sync
        self._syncs: dict[int, asyncio.Future[None]] = {}
        self._next_sync = 0

    def __aiter__(self) -> Self:
        return self

    async def __anext__(self) -> FsEvent:
        conn = self._conn
        if conn is None:
            raise StopAsyncIteration
        try:
            while True:
                message = await conn.read_json()
                kind = message.get("ev")
                if kind == "fs":
                    return FsEvent(str(message["name"]), str(message["type"]))
                if kind == "synced":
                    number = message.get("n")
                    waiter = self._syncs.pop(number, None) if isinstance(number, int) else None
                    if waiter is not None and not waiter.done():
                        waiter.set_result(None)
        except BaseException:
            await self.aclose()
            raise

    async def sync(self, timeout_s: float = UNARY_TIMEOUT_S) -> bool:
        """Returns once the events queued in the sandbox before this call were iterated;
        False (at once) if the guest cannot sync, or after ``timeout_s`` without an answer."""
        conn = self._conn
        if conn is None or not self.can_sync:
            return False
        self._next_sync += 1
        number = self._next_sync
        waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._syncs[number] = waiter
        try:
            conn.writer.write(encode_json({"sync": number}))
            await conn.writer.drain()
            async with asyncio.timeout(timeout_s):
                await waiter
        except (OSError, TimeoutError, GuestError):
            return False
        finally:
            self._syncs.pop(number, None)
        return True

    async def aclose(self) -> None:
        await super().aclose()
        for waiter in self._syncs.values():
            if not waiter.done():
                waiter.set_exception(GuestUnavailable("the watch ended before its sync"))
        self._syncs.clear()


def _selector(pid: int | None, tag: str | None) -> dict[str, Any]:
    if (pid is None) == (tag is None):
        raise ValueError("give exactly one of pid and tag")
    return {"pid": pid} if pid is not None else {"tag": tag}


def _with_user(request: dict[str, Any], user: str | None) -> dict[str, Any]:
    if user is not None:
        request["user"] = user
    return request


class GuestClient:
    """Talks to one sandbox's guest daemon over its Unix socket. Cheap to create; holds no
    connection between calls. ``user=None`` means the sandbox's default user."""

    def __init__(
        self,
        socket_path: str | os.PathLike[str],
        *,
        on_unreachable: Callable[[], None] | None = None,
    ) -> None:
        """``on_unreachable`` is called when a connection to the guest cannot be opened (its
        sandbox stopped, or the guest died): the owner checks the sandbox's state then."""
        self.socket_path = os.fspath(socket_path)
        self._on_unreachable = on_unreachable

    async def _open(self, request: dict[str, Any]) -> _Connection:
        # Imported here: this module ships in the guest's zipapp (never imported there), which
        # holds nothing of the gateway's package. The span covers connecting and sending.
        from sandgate.observability import tracing

        sandbox_id = os.path.basename(os.path.dirname(self.socket_path))
        with tracing.span(f"guest.{request.get('op')}", sandbox__id=sandbox_id):
            try:
                return await _Connection.open(self.socket_path, request)
            except GuestUnavailable:
                if self._on_unreachable is not None:
                    self._on_unreachable()
                raise

    # ---- health and environment

    async def ping(self, *, timeout_s: float = UNARY_TIMEOUT_S) -> dict[str, Any]:
        """``{"ok": true, "version": 1, "pid": N}``; the readiness check."""
        return await _unary(self._open({"op": "ping"}), timeout_s)

    async def envs(self) -> dict[str, str]:
        """The sandbox-level environment variables."""
        return dict((await _unary(self._open({"op": "envs"})))["envs"])

    async def configure(
        self,
        envs: dict[str, str],
        *,
        default_user: str | None = None,
        default_workdir: str | None = None,
    ) -> None:
        """Replaces the sandbox-level environment (a claimed warm sandbox gets its own) and,
        when given, the default user (``not_found`` if the sandbox has no such user) and
        working directory of processes started from now on."""
        request: dict[str, Any] = {"op": "configure", "envs": dict(envs)}
        if default_user is not None:
            request["default_user"] = default_user
        if default_workdir is not None:
            request["default_workdir"] = default_workdir
        await _unary(self._open(request))

    async def logs(self, after: int, *, timeout_s: float = UNARY_TIMEOUT_S) -> dict[str, Any]:
        """The guest's process log after sequence number ``after``, as the guest sent it
        (``guest._journal``: ``first``, ``last``, ``more``, ``entries``); the caller checks
        every entry (the guest speaks for the sandbox, which is not trusted)."""
        return await _unary(self._open({"op": "logs", "after": after}), timeout_s)

    # ---- processes

    async def spawn(
        self,
        cmd: str,
        args: list[str] | tuple[str, ...] = (),
        *,
        envs: dict[str, str] | None = None,
        cwd: str | None = None,
        user: str | None = None,
        tag: str | None = None,
        stdin: bool = False,
        pty: tuple[int, int] | None = None,
        timeout_ms: int = 0,
    ) -> ProcessStream:
        """Starts a process and returns its stream once the guest reported the pid.

        ``pty`` is ``(cols, rows)``. ``timeout_ms`` > 0 makes the guest SIGKILL the process
        group at the deadline (``Ended.timed_out``). Raises :class:`GuestError` when the
        process cannot start (bad cwd: ``invalid_argument``; too many: ``resource_exhausted``;
        unknown user: ``unauthenticated``). While tracing is on, the process gets the current
        span as ``TRACEPARENT`` (unless ``envs`` names one), so its tool calls join the trace.
        """
        from sandgate.observability import tracing  # not in the guest's zipapp (see _open)

        envs = dict(envs or {})
        parent = tracing.traceparent()
        if parent is not None:
            envs.setdefault("TRACEPARENT", parent)
        request: dict[str, Any] = {
            "op": "spawn",
            "cmd": cmd,
            "args": list(args),
            "envs": envs,
            "cwd": cwd or "",
            "tag": tag,
            "stdin": stdin,
            "pty": {"cols": pty[0], "rows": pty[1]} if pty is not None else None,
            "timeout_ms": timeout_ms,
        }
        return await self._process_stream(_with_user(request, user))

    async def connect_process(
        self, *, pid: int | None = None, tag: str | None = None
    ) -> ProcessStream:
        """Subscribes to a running (or just exited) process; ``not_found`` if unknown."""
        return await self._process_stream({"op": "connect", **_selector(pid, tag)})

    async def _process_stream(self, request: dict[str, Any]) -> ProcessStream:
        conn = await self._open(request)
        try:
            first = await conn.read_reply()
            if first.get("ev") != "start":
                raise GuestUnavailable(f"expected a start event, got {first!r}")
            return ProcessStream(conn, int(first["pid"]))
        except BaseException:
            conn.close()
            raise

    async def list_processes(self) -> list[ProcessInfo]:
        reply = await _unary(self._open({"op": "list"}))
        return [
            ProcessInfo(
                pid=p["pid"],
                tag=p.get("tag"),
                cmd=p["cmd"],
                args=list(p["args"]),
                envs=dict(p["envs"]),
                cwd=p["cwd"],
                pty=bool(p["pty"]),
            )
            for p in reply["processes"]
        ]

    async def signal(self, sig: int, *, pid: int | None = None, tag: str | None = None) -> None:
        """Sends ``sig`` to the process's whole group; ``not_found`` if it is not running."""
        await _unary(self._open({"op": "signal", "signal": int(sig), **_selector(pid, tag)}))

    async def send_input(
        self, data: bytes, *, pid: int | None = None, tag: str | None = None, pty: bool = False
    ) -> None:
        """Writes to stdin (``pty=False``) or the terminal (``pty=True``); returns once the
        guest wrote all of it. ``failed_precondition`` if the process takes no such input."""
        request = {
            "op": "send_input",
            "data": base64.b64encode(data).decode("ascii"),
            "pty": pty,
            **_selector(pid, tag),
        }
        await _unary(self._open(request), None)

    async def close_stdin(self, *, pid: int | None = None, tag: str | None = None) -> None:
        await _unary(self._open({"op": "close_stdin", **_selector(pid, tag)}))

    async def resize(
        self, cols: int, rows: int, *, pid: int | None = None, tag: str | None = None
    ) -> None:
        request = {"op": "resize", "cols": cols, "rows": rows, **_selector(pid, tag)}
        await _unary(self._open(request))

    # ---- files

    async def stat(self, path: str, *, user: str | None = None) -> EntryInfo:
        reply = await _unary(self._open(_with_user({"op": "stat", "path": path}, user)))
        return EntryInfo.from_json(reply["entry"])

    async def list_dir(
        self, path: str, *, depth: int = 1, user: str | None = None
    ) -> list[EntryInfo]:
        """Entries under ``path`` in lexical pre-order, up to ``depth`` levels, root excluded."""
        request = _with_user({"op": "list_dir", "path": path, "depth": depth}, user)
        conn = await self._open(request)
        entries: list[EntryInfo] = []
        try:
            while True:
                reply = await conn.read_reply()
                entries += [EntryInfo.from_json(e) for e in reply["entries"]]
                if not reply.get("more"):
                    return entries
        finally:
            conn.close()

    async def make_dir(self, path: str, *, user: str | None = None) -> EntryInfo:
        """Creates ``path`` and its parents; ``already_exists`` if it is already a directory."""
        reply = await _unary(self._open(_with_user({"op": "make_dir", "path": path}, user)))
        return EntryInfo.from_json(reply["entry"])

    async def move(self, source: str, destination: str, *, user: str | None = None) -> EntryInfo:
        request = {"op": "move", "source": source, "destination": destination}
        reply = await _unary(self._open(_with_user(request, user)))
        return EntryInfo.from_json(reply["entry"])

    async def remove(self, path: str, *, user: str | None = None) -> None:
        """Removes a file or a whole tree; a missing path is not an error."""
        request = _with_user({"op": "remove", "path": path}, user)
        await _unary(self._open(request), _REMOVE_TIMEOUT_S)

    async def read_file(
        self,
        path: str,
        *,
        user: str | None = None,
        offset: int = 0,
        length: int | None = None,
    ) -> FileReader:
        """Opens a regular file for reading. Directories, FIFOs, sockets and devices are
        ``invalid_argument``; a missing file is ``not_found``; a file the kernel generates
        (procfs, sysfs) larger than the guest reads of one is ``invalid_argument`` with
        reason ``too_large``."""
        request: dict[str, Any] = {"op": "read_file", "path": path, "offset": offset}
        if length is not None:
            request["length"] = length
        conn = await self._open(_with_user(request, user))
        try:
            # A file with no fixed size (procfs) is read whole before the answer; the read
            # never blocks, so an answer that does not come means an unreachable guest.
            async with asyncio.timeout(UNARY_TIMEOUT_S):
                header = await conn.read_reply()
        except TimeoutError:
            conn.close()
            raise GuestUnavailable(
                f"the sandbox's guest did not answer within {UNARY_TIMEOUT_S:g}s"
            ) from None
        except BaseException:
            conn.close()
            raise
        return FileReader(conn, header)

    async def write_file(
        self,
        path: str,
        data: bytes | AsyncIterable[bytes],
        *,
        user: str | None = None,
        metadata: dict[str, str] | None = None,
    ) -> EntryInfo:
        """Uploads ``data`` to ``path`` (parents created; replaced atomically at the end; the
        ``user.e2b.*`` metadata set replaced by ``metadata``). If the upload is cancelled
        the target is left untouched. Out of space is ``resource_exhausted`` with reason
        ``disk_full``."""
        request = _with_user({"op": "write_file", "path": path, "metadata": metadata or {}}, user)
        conn = await self._open(request)
        # The guest answers before EOF only to refuse the upload: stop sending when it does.
        reply = asyncio.ensure_future(conn.read_reply())
        try:
            try:
                async for chunk in _chunks(data):
                    if reply.done():
                        break
                    conn.writer.write(encode_frame(Kind.DATA, chunk))
                    await conn.writer.drain()
                else:
                    conn.writer.write(encode_frame(Kind.EOF))
                    await conn.writer.drain()
            except OSError:
                pass  # the guest stopped reading: its answer says why
            return EntryInfo.from_json((await reply)["entry"])
        finally:
            if reply.done() and not reply.cancelled():
                reply.exception()  # retrieved: a failure was already raised or superseded
            reply.cancel()
            conn.close()

    async def upload(
        self, *, user: str | None = None, metadata: dict[str, str] | None = None
    ) -> FileUpload:
        """Starts an upload of one or more files (see :class:`FileUpload`); each file's
        ``user.e2b.*`` metadata set becomes ``metadata``. Refusals (``permission_denied``,
        ``invalid_argument``, out of space: ``resource_exhausted`` with reason ``disk_full``)
        are raised by the upload's methods."""
        request = _with_user({"op": "write_files", "metadata": metadata or {}}, user)
        return FileUpload(await self._open(request))

    async def watch(
        self, path: str, *, recursive: bool = False, user: str | None = None
    ) -> WatchStream:
        """Returns once the watch is in place; events that happen after that are delivered."""
        request = _with_user({"op": "watch", "path": path, "recursive": recursive}, user)
        conn = await self._open(request)
        try:
            reply = await conn.read_reply()
        except BaseException:
            conn.close()
            raise
        return WatchStream(conn, can_sync=reply.get("sync") is True)

    # ---- ports

    async def tunnel(
        self, port: int, *, wait_s: float = 0.0
    ) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        """A raw byte stream to ``127.0.0.1:port`` inside the sandbox; ``unavailable`` if
        nothing listens there (after trying for up to ``wait_s`` seconds in the sandbox, at
        most ``MAX_TUNNEL_WAIT_S``). Close the writer to end the tunnel."""
        wait_s = min(max(wait_s, 0.0), MAX_TUNNEL_WAIT_S)
        request: dict[str, Any] = {"op": "tunnel", "port": port}
        if wait_s:
            request["wait_s"] = wait_s
        conn = await self._open(request)
        try:
            async with asyncio.timeout(wait_s + UNARY_TIMEOUT_S):
                await conn.read_reply()
        except TimeoutError:
            conn.close()
            raise GuestUnavailable(
                f"the sandbox's guest did not answer within {wait_s + UNARY_TIMEOUT_S:g}s"
            ) from None
        except BaseException:
            conn.close()
            raise
        return conn.reader, conn.writer


async def _chunks(data: bytes | AsyncIterable[bytes]) -> AsyncIterator[bytes]:
    if isinstance(data, bytes | bytearray | memoryview):
        view = memoryview(data)
        for start in range(0, len(view), _UPLOAD_CHUNK):
            yield bytes(view[start : start + _UPLOAD_CHUNK])
        return
    async for chunk in data:
        view = memoryview(chunk)
        for start in range(0, len(view), _UPLOAD_CHUNK):
            yield bytes(view[start : start + _UPLOAD_CHUNK])
