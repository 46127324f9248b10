"""The code interpreter's HTTP edge (it runs inside ``code-interpreter-v1`` sandboxes):
request bodies are strict JSON, refused with 400 ``invalid_json`` before any code runs."""

from __future__ import annotations

import asyncio

import pytest

from sandgate.interpreter import _http


def _request(body: bytes) -> _http.Request:
    async def parse() -> _http.Request | None:
        reader = asyncio.StreamReader()
        head = f"POST /execute HTTP/1.1\r\ncontent-length: {len(body)}\r\n\r\n".encode()
        reader.feed_data(head + body)
        reader.feed_eof()
        return await _http.read_request(reader)

    request = asyncio.run(parse())
    assert request is not None
    return request


@pytest.mark.parametrize(
    "body",
    [
        b'{"code": "print(1)", "code": "print(2)"}',
        b'{"code": "print(1)", "env_vars": {"A": "1", "A": "2"}}',
        b'{"code": "\\ud800"}',
        b'{"code": "\xff"}',
        b'{"code": "x", "n": NaN}',
        b'{"code": "x", "n": 1' + b"0" * 5000 + b"}",
        b'{"code": "x", "n": ' + b"[" * 100 + b"]" * 100 + b"}",
    ],
)
def test_strict_execute_body_is_refused_with_a_stable_code(body: bytes) -> None:
    with pytest.raises(_http.BadRequest) as raised:
        _request(body).json()
    assert raised.value.status == 400
    assert str(raised.value).startswith("invalid_json:")


def test_strict_valid_execute_body_is_read() -> None:
    body = b'{"code": "print(1)", "context_id": null, "language": "python", "env_vars": {}}'
    assert _request(body).json()["code"] == "print(1)"
