"""Directory watching with inotify (through ``ctypes``; the guest has no dependencies).

Events are reported with ``name`` relative to the watched directory and a type among
``create``, ``write``, ``remove``, ``rename``, ``chmod``. The temp files of the write
operations are hidden: the rename that publishes one is reported as the events E2B's envd
causes writing the file in place (:func:`published`), so clients that count a write's events
see the same numbers. A client may ask for a *sync* (protocol.py): every event the kernel has
queued until then is sent before the answer, so events of an operation that has returned are
never still on their way.
"""

from __future__ import annotations

import ctypes
import errno
import os
import select
import socket
import stat
import struct
from typing import Any

from ._errors import OpError, from_oserror
from ._files import TempFlags, is_temp_name, temp_flags
from ._wire import FrameError, recv_frame, send_json
from .protocol import Kind, decode_json, encode_json

__all__ = ["watch"]

IN_MODIFY = 0x2
IN_ATTRIB = 0x4
IN_MOVED_FROM = 0x40
IN_MOVED_TO = 0x80
IN_CREATE = 0x100
IN_DELETE = 0x200
IN_DELETE_SELF = 0x400
IN_MOVE_SELF = 0x800
IN_Q_OVERFLOW = 0x4000
IN_IGNORED = 0x8000
IN_ONLYDIR = 0x1000000
IN_ISDIR = 0x40000000
IN_NONBLOCK = 0o4000
IN_CLOEXEC = 0o2000000

_MASK = (
    IN_MODIFY
    | IN_ATTRIB
    | IN_MOVED_FROM
    | IN_MOVED_TO
    | IN_CREATE
    | IN_DELETE
    | IN_DELETE_SELF
    | IN_MOVE_SELF
    | IN_ONLYDIR
)
_EVENT = struct.Struct("iIII")
_MAX_PENDING_MOVES = 1024
_MAX_SYNC_FRAME = 4096

_libc: ctypes.CDLL | None = None


def _lib() -> ctypes.CDLL:
    global _libc
    if _libc is None:
        try:
            lib = ctypes.CDLL(None, use_errno=True)
            lib.inotify_init1  # noqa: B018 - probe that the symbol exists
        except (OSError, AttributeError):
            lib = ctypes.CDLL("libc.so.6", use_errno=True)
        lib.inotify_init1.argtypes = [ctypes.c_int]
        lib.inotify_init1.restype = ctypes.c_int
        lib.inotify_add_watch.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_uint32]
        lib.inotify_add_watch.restype = ctypes.c_int
        _libc = lib
    return _libc


def _check(result: int, what: str) -> int:
    if result < 0:
        err = ctypes.get_errno()
        if err == errno.ENOSPC:
            raise OpError("resource_exhausted", f"{what}: inotify watch limit reached")
        raise from_oserror(OSError(err, os.strerror(err)), what)
    return result


class _Watcher:
    def __init__(self, root: str, recursive: bool) -> None:
        self.root = root
        self.recursive = recursive
        self.fd = _check(_lib().inotify_init1(IN_NONBLOCK | IN_CLOEXEC), "inotify_init1")
        self.dirs: dict[int, str] = {}
        self.moves: dict[int, str] = {}

    def add(self, path: str, rel: str) -> None:
        wd = _lib().inotify_add_watch(self.fd, os.fsencode(path), _MASK)
        if wd < 0 and path != self.root:
            return  # a subdirectory vanished or is unreadable; keep watching the rest
        self.dirs[_check(wd, f"watch {path}")] = rel

    def add_tree(self, path: str, rel: str) -> None:
        self.add(path, rel)
        if not self.recursive:
            return
        for dirpath, dirnames, _ in os.walk(path):
            dirnames.sort()
            for name in dirnames:
                full = os.path.join(dirpath, name)
                self.add(full, os.path.relpath(full, self.root))

    def translate(self, data: bytes) -> list[dict[str, Any]]:
        events: list[dict[str, Any]] = []
        offset = 0
        while offset + _EVENT.size <= len(data):
            wd, mask, cookie, length = _EVENT.unpack_from(data, offset)
            raw = data[offset + _EVENT.size : offset + _EVENT.size + length]
            offset += _EVENT.size + length
            name = os.fsdecode(raw.rstrip(b"\0"))
            rel_dir = self.dirs.get(wd)
            if mask & IN_IGNORED:
                self.dirs.pop(wd, None)
                continue
            if rel_dir is None:
                continue
            if not name and rel_dir:
                continue  # self events of a subdirectory: its parent reports them
            rel = os.path.join(rel_dir, name) if rel_dir else name
            events.extend(self._types(mask, cookie, name, rel))
        return events

    def _types(self, mask: int, cookie: int, name: str, rel: str) -> list[dict[str, Any]]:
        def ev(kind: str) -> dict[str, Any]:
            return {"ev": "fs", "name": rel, "type": kind}

        if name and is_temp_name(name):
            if mask & IN_MOVED_FROM:
                if len(self.moves) >= _MAX_PENDING_MOVES:
                    self.moves.clear()
                self.moves[cookie] = name
            elif mask & IN_MOVED_TO:
                self.moves.pop(cookie, None)  # renamed to another temp name (flags added)
            return []
        out: list[dict[str, Any]] = []
        if mask & IN_MOVED_TO:
            source = self.moves.pop(cookie, None)
            flags = None if source is None else temp_flags(source)
            out += [ev(kind) for kind in (["create"] if flags is None else published(flags))]
        if mask & IN_CREATE:
            out.append(ev("create"))
        if mask & (IN_CREATE | IN_MOVED_TO) and mask & IN_ISDIR and self.recursive:
            self.add_tree(os.path.join(self.root, rel), rel)
        if mask & IN_MODIFY:
            out.append(ev("write"))
        if mask & (IN_DELETE | IN_DELETE_SELF):
            out.append(ev("remove"))
        if mask & (IN_MOVED_FROM | IN_MOVE_SELF):
            out.append(ev("rename"))
        if mask & IN_ATTRIB:
            out.append(ev("chmod"))
        return out

    def close(self) -> None:
        os.close(self.fd)


def published(flags: TempFlags) -> list[str]:
    """The events of a write published by renaming its temp file: those envd's in-place write
    causes. A new file: created (``O_CREAT``), chowned to the user (chmod), written (write;
    none for an empty file), then its metadata set (chmod, when it has any). A replaced file:
    chowned (chmod), truncated and written (one write), then its metadata set or cleared."""
    kinds = ["create", "chmod"] if flags.created else ["chmod"]
    if not (flags.created and flags.empty):
        kinds.append("write")
    if flags.metadata:
        kinds.append("chmod")
    return kinds


def watch(sock: socket.socket, path: str, recursive: bool) -> None:
    """Answers ``{"ok": true, "sync": true}`` once the watches are in place, then streams
    events until the client closes the connection; a ``{"sync": N}`` frame from the client is
    answered after every event queued so far, anything else ends the watch."""
    try:
        st = os.stat(path)
    except OSError as exc:
        raise from_oserror(exc, f"watch {path}") from None
    if not stat.S_ISDIR(st.st_mode):
        raise OpError("invalid_argument", f"path is not a directory: {path}")
    watcher = _Watcher(path, recursive)
    try:
        watcher.add_tree(path, "")
        send_json(sock, {"ok": True, "sync": True})
        poller = select.poll()
        poller.register(watcher.fd, select.POLLIN)
        poller.register(sock.fileno(), select.POLLIN)
        while True:
            for fd, _ in poller.poll():
                if fd == watcher.fd:
                    _report(watcher, sock)
                    continue
                number = _sync_request(sock)
                if number is None:
                    return
                _report(watcher, sock)
                send_json(sock, {"ev": "synced", "n": number})
    finally:
        watcher.close()


def _report(watcher: _Watcher, sock: socket.socket) -> None:
    """Sends every event the kernel has queued for ``watcher``."""
    while True:
        try:
            data = os.read(watcher.fd, 64 * 1024)
        except BlockingIOError:
            return
        events = watcher.translate(data)
        if events:
            sock.sendall(b"".join(encode_json(event) for event in events))


def _sync_request(sock: socket.socket) -> int | None:
    """The number of the client's ``{"sync": N}``; None when it closed or sent anything else."""
    try:
        frame = recv_frame(sock, _MAX_SYNC_FRAME)
        if frame is None or frame[0] != Kind.JSON:
            return None
        number = decode_json(frame[1]).get("sync")
    except (FrameError, OSError, ValueError):
        return None
    if not isinstance(number, int) or isinstance(number, bool):
        return None
    return number
