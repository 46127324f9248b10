"""``guest._lean``: the stand-ins the daemon's start uses for ``contextlib``, ``socket`` and
``json`` helpers must behave as those do, or a command's output, a file op's hand-off or a
reply would change with them."""

from __future__ import annotations

import json
import os
import socket
from typing import Any

import pytest

from sandgate.guest import _lean
from sandgate.guest._lean import accept, dumps, recv_fds, send_fds, suppress


def test_suppress_swallows_only_the_named_kinds() -> None:
    with suppress(KeyError, OSError):
        raise FileNotFoundError("a subclass of OSError")
    with suppress(KeyError):
        pass
    with pytest.raises(ValueError, match="not named"), suppress(KeyError, OSError):
        raise ValueError("not named")


def test_accept_returns_a_connected_blocking_close_on_exec_socket() -> None:
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(f"\0sandgate-test-lean-{os.getpid()}")
    listener.listen(1)
    client = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    client.connect(listener.getsockname())
    conn, _ = accept(listener)
    try:
        assert conn.family == socket.AF_UNIX and conn.type == socket.SOCK_STREAM
        assert conn.getblocking() and not os.get_inheritable(conn.fileno())
        client.sendall(b"ping")
        assert conn.recv(4) == b"ping"
    finally:
        for sock in (conn, client, listener):
            sock.close()


def test_fds_pass_as_socket_send_fds_and_recv_fds_pass_them() -> None:
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    read_end, write_end = os.pipe()
    try:
        send_fds(ours, [b"request"], [write_end, read_end])
        data, fds, flags, _ = recv_fds(theirs, 1024, 3)
        assert data == b"request" and flags == 0 and len(fds) == 2
        os.write(fds[0], b"through the passed fd")
        assert os.read(read_end, 100) == b"through the passed fd"
        # The stdlib's receiver reads what ours sends, and ours what the stdlib's sends.
        socket.send_fds(theirs, [b"back"], [fds[1]])
        data, back, _, _ = recv_fds(ours, 1024, 1)
        assert data == b"back" and len(back) == 1
        send_fds(ours, [b"plain"], [])
        assert socket.recv_fds(theirs, 1024, 1)[:2] == (b"plain", [])
        for fd in [*fds, *back]:
            os.close(fd)
    finally:
        ours.close()
        theirs.close()
        os.close(read_end)
        os.close(write_end)


_VALUES: list[Any] = [
    {"ok": True, "pid": 12, "exit": None, "nested": {"list": [1, 2.5, -0.0, 1e300, "x"]}},
    {"name": "caf\u00e9 \u2603 \U0001f600", "bad": "\udcff\udc80", "ctl": '\x00\n\t"\\'},
    [1, "two", [3, {"4": [5]}]],
    {3: "int key", 2.5: "float key", True: "bool key", None: "null key"},
    "plain",
    0,
    [],
    {},
]


@pytest.mark.parametrize("value", _VALUES)
def test_dumps_writes_what_json_dumps_writes(value: Any) -> None:
    assert dumps(value) == json.dumps(value, separators=(",", ":"))
    assert dumps(value, default=str) == json.dumps(value, separators=(",", ":"), default=str)


def test_dumps_refuses_or_stringifies_what_json_cannot_hold() -> None:
    with pytest.raises(TypeError, match="Object of type bytes is not JSON serializable"):
        dumps({"data": b"raw"})
    assert dumps({"data": b"raw", "set": {1}}, default=str) == '{"data":"b\'raw\'","set":"{1}"}'


def test_dumps_falls_back_to_json_where_the_c_encoder_is_unusable(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The guest runs on the template's Python; a private ``_json`` that takes another call
    must cost speed, never a reply."""

    def wrong_signature(*args: Any) -> Any:
        raise TypeError("make_encoder() takes 10 arguments")

    monkeypatch.setattr("_json.make_encoder", wrong_signature)
    assert _lean._c_encoder(str) is None
    monkeypatch.setattr(_lean, "_ENCODERS", {})
    assert dumps({"a": [1, "\u00e9"]}) == '{"a":[1,"\\u00e9"]}'
    assert dumps({"b": b"x"}, default=str) == '{"b":"b\'x\'"}'
