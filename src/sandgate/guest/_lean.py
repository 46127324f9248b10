"""The few conveniences the daemon took from ``contextlib``, ``socket`` and ``json``, over the
C modules those wrap.

Why: every sandbox's start pays the guest's imports before its first command, and those
three (with ``signal``, ``selectors`` and ``collections``) pull in ``enum``, ``re`` and
``functools``: ~15 ms of a ~35 ms guest start (``python3 -I -S``, this machine kind), for a
handful of helpers. The daemon's start imports only modules built into the interpreter
(``_socket``, ``_signal``, ``select``, ``_json``, ...) besides ``os``, and uses these instead;
``tests/unit/guest/test_start.py`` keeps the wrapped modules out. Modules that run later in
a forked file worker (``_worker``, ``_files``) import what they like.
"""

from __future__ import annotations

import _socket
import struct

TYPE_CHECKING = False  # not typing's: the guest's start never imports typing (see _loop)
if TYPE_CHECKING:
    from collections.abc import Callable, Sequence
    from types import TracebackType
    from typing import Any

__all__ = ["accept", "dumps", "recv_fds", "send_fds", "suppress"]

_INT = struct.calcsize("i")


class suppress:  # named as the contextlib helper it stands in for
    """``contextlib.suppress``: ends the ``with`` block quietly on one of ``kinds``."""

    __slots__ = ("_kinds",)

    def __init__(self, *kinds: type[BaseException]) -> None:
        self._kinds = kinds

    def __enter__(self) -> None:
        return None

    def __exit__(
        self,
        kind: type[BaseException] | None,
        value: BaseException | None,
        traceback: TracebackType | None,
    ) -> bool:
        return kind is not None and issubclass(kind, self._kinds)


def accept(listener: _socket.socket) -> tuple[_socket.socket, Any]:
    """``socket.socket.accept``: the new socket is close-on-exec (``accept4``) and blocking."""
    fd, address = listener._accept()  # type: ignore[attr-defined]  # absent from typeshed
    return _socket.socket(listener.family, listener.type, listener.proto, fileno=fd), address


def send_fds(sock: _socket.socket, buffers: Sequence[bytes], fds: Sequence[int]) -> int:
    """``socket.send_fds``: ``buffers`` with ``fds`` passed along (``SCM_RIGHTS``)."""
    rights = struct.pack(f"{len(fds)}i", *fds)
    return sock.sendmsg(buffers, [(_socket.SOL_SOCKET, _socket.SCM_RIGHTS, rights)])


def recv_fds(sock: _socket.socket, bufsize: int, maxfds: int) -> tuple[bytes, list[int], int, Any]:
    """``socket.recv_fds``: the data, the descriptors passed along, the flags, the address."""
    data, ancillary, flags, address = sock.recvmsg(bufsize, _socket.CMSG_LEN(maxfds * _INT))
    fds: list[int] = []
    for level, kind, payload in ancillary:
        if level == _socket.SOL_SOCKET and kind == _socket.SCM_RIGHTS:
            count = len(payload) // _INT
            fds.extend(struct.unpack(f"{count}i", payload[: count * _INT]))
    return data, fds, flags, address


def _refuse(value: object) -> Any:
    raise TypeError(f"Object of type {type(value).__name__} is not JSON serializable")


def _c_encoder(default: Callable[[Any], Any]) -> Callable[[Any, int], Sequence[str]] | None:
    """CPython's C encoder as ``json.dumps(..., separators=(",", ":"))`` builds it; ``None``
    if this interpreter's private ``_json`` does not take that call (the guest runs on the
    template's Python, whichever it is)."""
    try:
        from _json import encode_basestring_ascii, make_encoder

        encoder = make_encoder(  # markers, default, encoder, indent, separators, sort, skip, nan
            None, default, encode_basestring_ascii, None, ":", ",", False, False, True
        )
        encoder({"probe": [0, 0.5, None, True]}, 0)
    except (ImportError, TypeError):
        return None
    return encoder


_ENCODERS = {_refuse: _c_encoder(_refuse), str: _c_encoder(str)}


def dumps(value: Any, default: Callable[[Any], Any] = _refuse) -> str:
    """Compact ASCII JSON text, as ``json.dumps(value, separators=(",", ":"))`` writes it;
    ``default`` is ``_refuse`` (a ``TypeError``, like ``json``) or ``str``."""
    encoder = _ENCODERS.get(default)
    if encoder is None:
        import json  # only where the C encoder is not usable

        return json.dumps(value, separators=(",", ":"), default=default)
    return "".join(encoder(value, 0))
