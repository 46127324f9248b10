"""Issue 12, class 8 without a sandbox: how a request's ``Host`` is compared with the
authority the proxy checked, and how a tunnel's first plaintext bytes are recognised as HTTP.
The same cases run through a real server on both runtimes in
tests/security/test_egress_authority.py."""

from __future__ import annotations

import asyncio
import ipaddress

import pytest

from sandgate.egress.authority import Authority, check_host_header
from sandgate.egress.request import BadRequest, parse_head, read_http_head

_HTTP = Authority("a.test", 80)
_TLS = Authority("a.test", 443)


def _head(*hosts: bytes, version: bytes = b"HTTP/1.1") -> bytes:
    lines = b"".join(b"Host: " + h + b"\r\n" for h in hosts)
    return b"GET / " + version + b"\r\n" + lines + b"\r\n"


def _check(expected: Authority, default_port: int, *hosts: bytes, required: bool = True) -> None:
    check_host_header(
        parse_head(_head(*hosts)), expected, default_port=default_port, required=required
    )


@pytest.mark.parametrize(
    "host", [b"a.test", b"A.TEST", b"a.test.", b"a.test:80", b"A.Test.:80", b"a.test:0080"]
)
def test_equivalent_spellings_of_the_authority_pass(host: bytes) -> None:
    _check(_HTTP, 80, host)


@pytest.mark.parametrize("host", [b"a.test", b"a.test:443", b"A.TEST.:443"])
def test_equivalent_spellings_inside_tls_use_443_as_the_default(host: bytes) -> None:
    _check(_TLS, 443, host)


@pytest.mark.parametrize(
    ("expected", "default_port", "host"),
    [
        (_HTTP, 80, b"evil.test"),
        (_HTTP, 80, b"a.test:8080"),
        (_HTTP, 80, b"a.test:443"),
        (_TLS, 443, b"a.test:80"),
        (_TLS, 443, b"a.test:8443"),
        (Authority("a.test", 8443), 443, b"a.test"),
        (_HTTP, 80, b"sub.a.test"),
        (_HTTP, 80, b"a.test.evil.test"),
        (_HTTP, 80, b"127.0.0.1"),
        (_HTTP, 80, b"2130706433"),
        (Authority(ipaddress.ip_address("127.0.0.1"), 80), 80, b"a.test"),
        (Authority(ipaddress.ip_address("127.0.0.1"), 80), 80, b"127.0.0.2"),
    ],
)
def test_another_host_or_port_is_a_mismatch(
    expected: Authority, default_port: int, host: bytes
) -> None:
    with pytest.raises(BadRequest) as refused:
        _check(expected, default_port, host)
    assert refused.value.reason == "host_mismatch"


@pytest.mark.parametrize(
    "host",
    [
        b"",
        b"a.test:",
        b"a.test:x",
        b"a.test:99999",
        b"user@a.test",
        b"user:pw@a.test",
        b"a%2Etest",
        b"%61.test",
        "bücher.test".encode(),
        b"a.test/path",
        b"a test",
        b"a..test",
        b"[::1",
    ],
)
def test_unreadable_host_is_invalid(host: bytes) -> None:
    with pytest.raises(BadRequest) as refused:
        _check(_HTTP, 80, host)
    assert refused.value.reason == "host_invalid"


def test_two_host_headers_are_refused_even_when_equal() -> None:
    for hosts in ((b"a.test", b"a.test"), (b"a.test", b"evil.test")):
        with pytest.raises(BadRequest) as refused:
            _check(_HTTP, 80, *hosts)
        assert refused.value.reason == "host_duplicate"


def test_missing_host_is_refused_only_where_required() -> None:
    with pytest.raises(BadRequest) as refused:
        _check(_HTTP, 80)
    assert refused.value.reason == "host_missing"
    _check(_HTTP, 80, required=False)


def test_canonical_host_header_keeps_only_a_non_default_port() -> None:
    assert _HTTP.host_header(80) == b"a.test"
    assert Authority("a.test", 8080).host_header(80) == b"a.test:8080"
    assert _TLS.host_header(443) == b"a.test"
    assert Authority(ipaddress.ip_address("::1"), 80).host_header(80) == b"[::1]"


async def _sniff(*chunks: bytes, eof: bool = True) -> tuple[bytes, bool]:
    reader = asyncio.StreamReader()
    for chunk in chunks[1:]:
        reader.feed_data(chunk)
    if eof:
        reader.feed_eof()
    return await read_http_head(reader, chunks[0], 5.0)


@pytest.mark.parametrize(
    "data",
    [
        b"SSH-2.0-OpenSSH_9.2p1\r\n",
        b"\x00\x00\x00\x08\x04\xd2\x16\x2f",
        b"EHLO x\r\n",
        b"PING\r\n",
        b"a001 LOGIN user pass\r\n",
        b"*1\r\n$4\r\nPING\r\n",
    ],
)
def test_non_http_first_bytes_are_recognised_without_waiting(data: bytes) -> None:
    # No EOF: a protocol the server speaks first must not be held up. What was read is
    # returned, to be forwarded first; the rest stays in the stream.
    read, is_http = asyncio.run(_sniff(data[:1], data[1:], eof=False))
    assert not is_http
    assert data.startswith(read)


def test_http_first_bytes_are_read_up_to_the_whole_head() -> None:
    head = b"GET /x HTTP/1.1\r\nHost: evil.test\r\n\r\n"
    chunks = (head[:1], head[1:9], head[9:28], head[28:])
    assert asyncio.run(_sniff(*chunks)) == (head, True)


def test_a_stalled_http_start_times_out_rather_than_being_spliced() -> None:
    async def stalled() -> None:
        reader = asyncio.StreamReader()
        reader.feed_data(b"ET / HT")
        await read_http_head(reader, b"G", 0.05)

    with pytest.raises(TimeoutError):
        asyncio.run(stalled())
