"""Authorities (host and port) and the one way the proxy compares them (the threat model's
authority checks: refuse, not repair).

Trust: the request line, the ``Host`` header and the TLS server name are all written by code
inside a sandbox. The proxy checks and dials the authority of the request line (or of the
CONNECT); a ``Host`` that names anything else would have the far end (a virtual host, a CDN)
serve another site than the one the policy allowed, so it is refused with 400, never
rewritten and forwarded.

One canonical form for both sides, so equal means equal:

* the host through ``names.canonical_host`` (lower case, one trailing dot dropped; an IP
  literal in any spelling becomes the address);
* the port as a number, the scheme's default port when none is written (80 for ``http``,
  443 inside a TLS tunnel), so ``a.test``, ``A.TEST.`` and ``a.test:80`` are the same
  authority for an ``http://a.test/`` request and the upstream receives ``Host: a.test``.

Refused (``reason``): more than one ``Host`` (``host_duplicate``), an empty or unreadable one:
non-ASCII, percent-encoded, with userinfo, a bad port (``host_invalid``), none where one is
required (``host_missing``), or one that names another host or port (``host_mismatch``).
"""

from __future__ import annotations

from dataclasses import dataclass

from sandgate.egress.names import Host, InvalidHost, canonical_host, format_host
from sandgate.egress.request import BadRequest, Head, split_authority

__all__ = ["HTTPS_PORT", "HTTP_PORT", "Authority", "check_host_header"]

HTTP_PORT = 80
HTTPS_PORT = 443


@dataclass(frozen=True)
class Authority:
    """A canonical host and a port."""

    host: Host
    port: int

    def __str__(self) -> str:
        return f"{format_host(self.host)}:{self.port}"

    def host_header(self, default_port: int) -> bytes:
        """The canonical ``Host`` value: the port only when it is not the default."""
        text = format_host(self.host)
        return (text if self.port == default_port else f"{text}:{self.port}").encode()


def _named(value: bytes, default_port: int) -> Authority:
    try:
        text = value.decode("ascii")
    except UnicodeDecodeError:
        raise BadRequest("the Host header must be ASCII", "host_invalid") from None
    if not text:
        raise BadRequest("the Host header is empty", "host_invalid")
    try:
        host, port = split_authority(text, default_port)
        return Authority(canonical_host(host), port)
    except (BadRequest, InvalidHost) as exc:
        raise BadRequest(f"the Host header is not a host[:port]: {exc}", "host_invalid") from None


def check_host_header(
    head: Head, expected: Authority, *, default_port: int, required: bool
) -> None:
    """Checks that ``head``'s ``Host`` names ``expected`` (see the module docstring).

    ``required``: whether a request without ``Host`` is refused (``host_missing``); the
    proxy waives it only for an HTTP/1.0 absolute-form request, whose request line already
    says everything. Raises ``BadRequest`` with the reason code."""
    values = head.values(b"host")
    if len(values) > 1:
        raise BadRequest("more than one Host header", "host_duplicate")
    if not values:
        if required:
            raise BadRequest(
                f"no Host header; send 'Host: {expected.host_header(default_port).decode()}'",
                "host_missing",
            )
        return
    named = _named(values[0], default_port)
    if named != expected:
        raise BadRequest(
            f"the Host header names {named}, but this request is for {expected}; the proxy "
            "does not forward a request to one host that asks for another",
            "host_mismatch",
        )
