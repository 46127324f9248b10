"""The one request a proxy connection starts with: ``CONNECT host:port`` or an absolute-form
``http://`` request. Strict on purpose (NET-10): a request this module cannot read exactly
one way is refused with 400 before anything is dialled.

For plain HTTP the head is rewritten for the origin: origin-form target, ``Host`` set from the
URI, hop-by-hop and ``Proxy-*`` headers dropped, ``Connection: close`` added, so the upstream
ends the exchange and one proxy connection carries one upstream connection.
"""

from __future__ import annotations

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
    "split_authority",
]

#: Largest request head (request line and headers) accepted.
MAX_HEAD: Final = 16 * 1024
_TOKEN = re.compile(rb"^[!#$%&'*+\-.^_`|~0-9A-Za-z]+$")
_VERSION = re.compile(rb"^HTTP/1\.[01]$")
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
    """The request cannot be read unambiguously; the message says why."""


@dataclass(frozen=True)
class ProxyRequest:
    method: str
    #: The host exactly as written (canonicalised later, by the policy step).
    host: str
    port: int
    #: Bytes to send upstream before splicing (empty for CONNECT).
    upstream_head: bytes

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
    try:
        target = parts[1].decode("ascii")
    except UnicodeDecodeError:
        raise BadRequest("request target must be ASCII") from None
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
        return ProxyRequest(parsed.method, host, port, b"")
    return _plain(parsed)


def _plain(head: Head) -> ProxyRequest:
    url = urlsplit(head.target)
    if url.scheme.lower() != "http" or not url.netloc:
        raise BadRequest("only CONNECT and absolute http:// requests are proxied")
    if "@" in url.netloc:
        raise BadRequest("userinfo in the URL is not accepted")
    host, port = split_authority(url.netloc, 80)
    check_framing(head)
    headers, method, version = head.headers, head.method, head.version
    named = {
        token.strip().lower()
        for n, _, v in headers
        if n == b"connection"
        for token in v.split(b",")
    }
    path = url.path or "/"
    if url.query:
        path += "?" + url.query
    authority = url.netloc if port != 80 or url.netloc.endswith(":80") else host
    out = [f"{method} {path} ".encode() + version, b"Host: " + authority.encode()]
    out += [name + b": " + v for n, name, v in headers if n not in HOP_BY_HOP | named]
    out.append(b"Connection: close")
    return ProxyRequest(method, host, port, b"\r\n".join(out) + b"\r\n\r\n")
