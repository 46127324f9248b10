import asyncio
import json
import struct
from collections.abc import AsyncIterator
from typing import Any

import pytest

from sandgate.api.e2b.connect import (
    RpcError,
    StreamDropped,
    envelope,
    stream_response,
    with_keepalive,
)


def _frames(data: bytes) -> list[tuple[int, dict[str, Any]]]:
    frames, offset = [], 0
    while offset < len(data):
        flags, length = struct.unpack_from(">BI", data, offset)
        frames.append((flags, json.loads(data[offset + 5 : offset + 5 + length])))
        offset += 5 + length
    return frames


async def _body(response: Any) -> bytes:
    """What the response sends as an ASGI app, for a client that stays."""
    sent: list[dict[str, Any]] = []

    async def receive() -> dict[str, Any]:
        await asyncio.Event().wait()  # the client never leaves
        raise AssertionError

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    await response({"type": "http"}, receive, send)
    assert sent[0]["type"] == "http.response.start" and sent[0]["status"] == 200
    assert [m["more_body"] for m in sent[1:]] == [True] * (len(sent) - 2) + [False]
    return b"".join(m["body"] for m in sent[1:])


async def _one_then_silence(closed: asyncio.Event) -> AsyncIterator[dict[str, Any]]:
    """A source that sends one message, then nothing (a process printing nothing more), and
    sets ``closed`` when it is closed."""
    try:
        yield {"n": 1}
        await asyncio.Event().wait()
        yield {"never": True}
    finally:
        closed.set()


def test_envelope_layout() -> None:
    assert envelope({}) == b"\x00\x00\x00\x00\x02{}"
    assert envelope({"a": 1}, end=True)[:5] == b"\x02\x00\x00\x00\x07"


def test_stream_always_ends_with_end_of_stream() -> None:
    async def messages() -> AsyncIterator[dict[str, Any]]:
        yield {"event": {"start": {"pid": 1}}}

    response = stream_response(messages())
    assert response.headers["content-type"] == "application/connect+json"
    frames = _frames(asyncio.run(_body(response)))
    assert frames == [(0, {"event": {"start": {"pid": 1}}}), (2, {})]


def test_rpc_error_becomes_the_end_of_stream_error() -> None:
    async def messages() -> AsyncIterator[dict[str, Any]]:
        yield {"x": 1}
        raise RpcError("deadline_exceeded", "too slow")

    frames = _frames(asyncio.run(_body(stream_response(messages()))))
    assert frames[-1] == (2, {"error": {"code": "deadline_exceeded", "message": "too slow"}})


def test_keepalive_fills_silence_and_stops_with_the_source() -> None:
    async def scenario() -> list[dict[str, Any]]:
        release = asyncio.Event()

        async def source() -> AsyncIterator[dict[str, Any]]:
            yield {"n": 1}
            await release.wait()
            yield {"n": 2}

        seen: list[dict[str, Any]] = []
        async for message in with_keepalive(source(), 0.01, {"keepalive": {}}):
            seen.append(message)
            if message == {"keepalive": {}}:
                release.set()
        return seen

    seen = asyncio.run(scenario())
    assert seen[0] == {"n": 1}
    assert {"keepalive": {}} in seen
    assert seen[-1] == {"n": 2}


def test_closing_early_closes_the_source() -> None:
    closed = asyncio.Event()

    async def scenario() -> None:
        stream = with_keepalive(_one_then_silence(closed), 10, {"keepalive": {}})
        assert await stream.__anext__() == {"n": 1}
        await stream.aclose()

    asyncio.run(scenario())
    assert closed.is_set()


@pytest.mark.parametrize(
    ("headers", "expected"),
    [
        ({"host": "8000-abc123.sandbox.localhost"}, (8000, "abc123")),
        (
            {"host": "49983-abc.example.com:443", "e2b-sandbox-id": "zzz", "e2b-sandbox-port": "1"},
            (49983, "abc"),
        ),
        ({"host": "8000-abc:7788"}, (8000, "abc")),
        ({"e2b-sandbox-id": "abc", "e2b-sandbox-port": "49999"}, (49999, "abc")),
        ({"e2b-sandbox-id": "abc", "e2b-sandbox-port": "65535"}, (65535, "abc")),
        ({"host": "localhost:7788"}, None),
        ({"host": "api.sandbox.localhost"}, None),
        ({"host": "api-1.example.com"}, None),
        ({"host": "127-0-0-1.nip.io"}, None),
    ],
)
def test_routing_rules(headers: dict[str, str], expected: object) -> None:
    from sandgate.api.routing import _target

    assert _target(headers) == expected


@pytest.mark.parametrize(
    ("headers", "code", "message"),
    [
        ({"e2b-sandbox-id": "abc"}, "invalid_request", "Missing header: E2b-Sandbox-Port"),
        ({"e2b-sandbox-port": "1"}, "invalid_request", "Missing header: E2b-Sandbox-Id"),
        ({"e2b-sandbox-id": "abc", "e2b-sandbox-port": "x"}, "invalid_port", "E2b-Sandbox-Port"),
        ({"e2b-sandbox-id": "abc", "e2b-sandbox-port": "0"}, "invalid_port", "1..65535"),
        ({"host": "0-abc.sandbox.localhost"}, "invalid_port", "Host"),
        ({"host": "-1-abc.sandbox.localhost"}, "invalid_port", "Host"),
        ({"host": "65536-abc.sandbox.localhost"}, "invalid_port", "Host"),
        ({"host": "8_0-abc.sandbox.localhost"}, "invalid_port", "Host"),
        ({"host": "+80-abc:7788"}, "invalid_port", "Host"),
    ],
)
def test_routing_errors_have_a_stable_code(
    headers: dict[str, str], code: str, message: str
) -> None:
    from sandgate.api.routing import _target
    from sandgate.errors import InvalidRequest

    with pytest.raises(InvalidRequest, match=message) as raised:
        _target(headers)
    assert raised.value.code == code


def test_a_client_that_leaves_ends_the_stream_and_closes_its_source() -> None:
    closed = asyncio.Event()
    sent: list[dict[str, Any]] = []

    async def scenario() -> None:
        left = asyncio.Event()

        async def receive() -> dict[str, Any]:
            await left.wait()
            return {"type": "http.disconnect"}

        async def send(message: dict[str, Any]) -> None:
            sent.append(message)
            if len(sent) == 2:  # the first envelope is out: the client goes
                left.set()

        source = _one_then_silence(closed)
        stream = stream_response(with_keepalive(source, 60, {"keepalive": {}}))
        await asyncio.wait_for(stream({"type": "http"}, receive, send), 10)
        task = asyncio.current_task()
        assert task is not None and task.cancelling() == 0  # nothing left pending

    asyncio.run(scenario())
    assert closed.is_set()
    assert len(sent) == 2  # no end-of-stream for a client that is gone


def test_an_exception_other_than_an_rpc_error_drops_the_connection() -> None:
    async def messages() -> AsyncIterator[dict[str, Any]]:
        yield {"n": 1}
        raise StreamDropped

    with pytest.raises(StreamDropped):
        asyncio.run(_body(stream_response(with_keepalive(messages(), 60, {"k": {}}))))


def test_the_deadline_ends_the_stream_and_closes_the_source() -> None:
    closed = asyncio.Event()
    stream = with_keepalive(_one_then_silence(closed), 60, {"keepalive": {}}, deadline_ms=50)
    frames = _frames(asyncio.run(_body(stream_response(stream))))
    assert frames[0] == (0, {"n": 1})
    assert frames[-1][1]["error"]["code"] == "deadline_exceeded"
    assert closed.is_set()


def test_keepalive_reads_at_most_one_message_ahead_of_its_reader() -> None:
    produced: list[int] = []

    async def scenario() -> None:
        async def source() -> AsyncIterator[dict[str, Any]]:
            for n in range(100):
                produced.append(n)
                yield {"n": n}

        stream = with_keepalive(source(), 60, {"keepalive": {}})
        assert await stream.__anext__() == {"n": 0}
        for _ in range(20):  # let the reader run as far as it can
            await asyncio.sleep(0)
        assert len(produced) <= 3  # taken, queued, and one waiting for room
        await stream.aclose()

    asyncio.run(scenario())
