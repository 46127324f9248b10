"""The one request a proxy connection starts with: ``CONNECT host:port`` or an absolute-form
``http://`` request. Strict on purpose (NET-10): a request this module cannot read exactly
one way is refused with 400 before anything is dialled.

Nothing here rewrites a request: it says what the request names (method, authority, the
origin-form target to forward) and leaves the ``Host`` check (``authority``) and the
forwarding (``exchange``) to others. Every ``BadRequest`` carries a stable ``reason`` code
for the refusal and the audit record.
"""

from __future__ import annotations

import asyncio
import re
from dataclasses import dataclass
from typing import Final
from urllib.parse import urlsplit

__all__ = [
    "HOP_BY_HOP",
    "MAX_HEAD",
    "BadRequest",
    "Head",
    "ProxyRequest",
    "check_framing",
    "parse_head",
    "parse_request",
    "read_http_head",
    "split_authority",
]

#: Largest request head (request line and headers) accepted.
MAX_HEAD: Final = 16 * 1024
_TOKEN = re.compile(rb"^[!#$%&'*+\-.^_`|~0-9A-Za-z]+$")
_VERSION = re.compile(rb"^HTTP/1\.[01]$")
#: A request target: visible ASCII only (no spaces, tabs, controls, DEL or non-ASCII).
_TARGET = re.compile(r"^[\x21-\x7e]+$")
#: Longest method accepted while deciding whether a tunnel's first bytes are HTTP.
_MAX_METHOD = 32
HOP_BY_HOP: Final = frozenset(
    {
        b"connection",
        b"keep-alive",
        b"proxy-connection",
        b"proxy-authorization",
        b"proxy-authenticate",
        b"te",
        b"trailer",
        b"upgrade",
        b"host",
    }
)


class BadRequest(ValueError):
    """The request cannot be read unambiguously, or names its destination in a way the
    proxy refuses; the message says why, ``reason`` is the stable code."""

    def __init__(self, message: str, reason: str = "bad_request") -> None:
        super().__init__(message)
        self.reason = reason


@dataclass(frozen=True)
class ProxyRequest:
    method: str
    #: The host exactly as written (canonicalised later, by the policy step).
    host: str
    port: int
    #: The parsed head (for an absolute-form request, its Host is checked against the URI).
    head: Head
    #: The origin-form target to forward (absolute-form requests); empty for CONNECT.
    origin_target: str = ""

    @property
    def is_connect(self) -> bool:
        return self.method == "CONNECT"


def split_authority(authority: str, default_port: int | None) -> tuple[str, int]:
    if authority.startswith("["):
        end = authority.find("]")
        if end < 0:
            raise BadRequest("unterminated IPv6 address")
        host, rest = authority[: end + 1], authority[end + 1 :]
    else:
        host, sep, port_text = authority.rpartition(":")
        if not sep:
            host, rest = authority, ""
        else:
            rest = ":" + port_text
    if rest:
        if not rest.startswith(":") or not rest[1:].isdigit() or len(rest) > 6:
            raise BadRequest(f"bad port in '{authority}'")
        port = int(rest[1:])
    elif default_port is None:
        raise BadRequest("CONNECT needs host:port")
    else:
        port = default_port
    if not host or not 0 < port < 65536:
        raise BadRequest(f"bad authority '{authority}'")
    return host, port


@dataclass(frozen=True)
class Head:
    """A request head that parsed exactly one way. ``headers`` are (lower-case name, name,
    value) triples, in order."""

    method: str
    target: str
    version: bytes
    headers: list[tuple[bytes, bytes, bytes]]

    def values(self, name: bytes) -> list[bytes]:
        return [v for n, _, v in self.headers if n == name]


def parse_head(head: bytes) -> Head:
    """Request line and header syntax of a head that ends with CRLFCRLF; raises
    ``BadRequest``."""
    if len(head) > MAX_HEAD:
        raise BadRequest("request head too large")
    lines = head[:-4].split(b"\r\n") if head.endswith(b"\r\n\r\n") else []
    if not lines:
        raise BadRequest("incomplete request head")
    parts = lines[0].split(b" ")
    if len(parts) != 3 or not _TOKEN.match(parts[0]) or not _VERSION.match(parts[2]):
        raise BadRequest("request line must be 'METHOD target HTTP/1.x'")
    target = parts[1].decode("latin-1")
    if not _TARGET.match(target):
        raise BadRequest("the request target must be visible ASCII (no spaces or controls)")
    headers: list[tuple[bytes, bytes, bytes]] = []
    for line in lines[1:]:
        if line[:1] in (b" ", b"\t"):
            raise BadRequest("obsolete line folding is not accepted")
        name, sep, value = line.partition(b":")
        if not sep or not _TOKEN.match(name) or b"\r" in value or b"\n" in value:
            raise BadRequest("malformed header line")
        headers.append((name.lower(), name, value.strip(b" \t")))
    return Head(parts[0].decode(), target, parts[2], headers)


def check_framing(head: Head) -> None:
    """Refuses every body framing two parsers could read differently (NET-10)."""
    lengths = head.values(b"content-length")
    encodings = head.values(b"transfer-encoding")
    if len(lengths) > 1:
        raise BadRequest("more than one Content-Length")
    if lengths and encodings:
        raise BadRequest("both Content-Length and Transfer-Encoding")
    if lengths and not lengths[0].isdigit():
        raise BadRequest("Content-Length must be digits")
    if len(encodings) > 1 or (encodings and encodings[0].lower() != b"chunked"):
        raise BadRequest("Transfer-Encoding other than a single 'chunked'")


def parse_request(head: bytes) -> ProxyRequest:
    """Parses a proxy request head that ends with CRLFCRLF; raises ``BadRequest``."""
    parsed = parse_head(head)
    if parsed.method == "CONNECT":
        host, port = split_authority(parsed.target, None)
        return ProxyRequest(parsed.method, host, port, parsed)
    return _absolute(parsed)


def _absolute(head: Head) -> ProxyRequest:
    if head.target.startswith("/") or head.target == "*":
        # SECURITY: the proxy never routes by Host; the destination is in the request line.
        raise BadRequest(
            "this is a proxy: send absolute-form ('GET http://host/path') or CONNECT "
            "host:port; a request for '/' names no destination (the Host header is not used "
            "to pick one)",
            "target_form",
        )
    url = urlsplit(head.target)
    if url.scheme.lower() != "http" or not url.netloc:
        raise BadRequest(
            "only CONNECT and absolute http:// requests are proxied (for https://, use CONNECT)",
            "target_form",
        )
    if "@" in url.netloc:
        raise BadRequest("userinfo in the URL is not accepted", "authority_invalid")
    if "#" in head.target:
        raise BadRequest("a request target has no fragment ('#')", "target_form")
    host, port = split_authority(url.netloc, 80)
    check_framing(head)
    path = url.path or "/"
    if url.query:
        path += "?" + url.query
    return ProxyRequest(head.method, host, port, head, path)


def _could_be_request_line(data: bytes) -> bool | None:
    """Whether ``data`` starts an HTTP request line: True once ``METHOD SP target SP HTTP/``
    is there, False as soon as it cannot be, None while undecided."""
    method, sep, rest = data.partition(b" ")
    if len(method) > _MAX_METHOD or (method and not _TOKEN.match(method)):
        return False
    if not sep:
        return None
    if not method:
        return False
    target, sep, version = rest.partition(b" ")
    if any(byte <= 0x20 or byte >= 0x7F for byte in target) or len(target) > MAX_HEAD:
        return False
    if not sep:
        return None
    if version[:5] == b"HTTP/":
        return True
    return None if b"HTTP/".startswith(version) else False


async def read_http_head(
    reader: asyncio.StreamReader, first: bytes, timeout_s: float
) -> tuple[bytes, bool]:
    """Reads on from ``first`` (a tunnel's first plaintext bytes) until it is clear whether
    the client speaks HTTP. Returns (every byte read, is_http); when HTTP, the bytes hold the
    request head (and possibly more), or as much of it as came: at most a little over
    ``MAX_HEAD`` bytes, or everything before the client stopped sending.

    Never waits for bytes once they cannot be HTTP, so protocols where the server speaks
    first, or that are not line-based, are not held up. Raises ``TimeoutError`` when an
    HTTP-looking start stalls: the caller refuses it rather than splicing it, so waiting
    cannot be used to skip the ``Host`` check.
    """
    data = first
    async with asyncio.timeout(timeout_s):
        while (verdict := _could_be_request_line(data)) is None:
            chunk = await reader.read(MAX_HEAD)
            if not chunk:
                return data, False
            data += chunk
        if not verdict:
            return data, False
        while b"\r\n\r\n" not in data and len(data) <= MAX_HEAD:
            chunk = await reader.read(MAX_HEAD)
            if not chunk:
                break
            data += chunk
    return data, True
