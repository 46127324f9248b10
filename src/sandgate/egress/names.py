"""Host names as the proxy sees them: one canonical form before any rule is matched.

Trust: the text comes from code inside a sandbox and is hostile. Canonical form: lower case,
one trailing dot stripped, IDNA A-labels, letters/digits/hyphens only (NET-06). Anything that
an HTTP client or ``inet_aton`` would read as an IPv4 address (``2130706433``, ``0x7f000001``,
``0177.0.0.1``, ``127.1``), and bracketed IPv6, becomes an ``IPAddress`` so that rules about
names can never match it (NET-03/04).
"""

from __future__ import annotations

import ipaddress
import re
import socket
from typing import TypeAlias

__all__ = ["Host", "IPAddress", "InvalidHost", "canonical_host", "format_host"]

IPAddress: TypeAlias = ipaddress.IPv4Address | ipaddress.IPv6Address
#: A canonical host: a lower-case A-label name, or an address.
Host: TypeAlias = str | IPAddress

_LABEL = re.compile(r"^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$")
_NUMERIC_LABEL = re.compile(r"^(0x[0-9a-f]*|[0-9]+)$")
_MAX_NAME = 253


class InvalidHost(ValueError):
    """The text is not a host name or address the proxy will consider."""


def canonical_host(text: str) -> Host:
    """Returns the canonical form of ``text``; raises ``InvalidHost``."""
    if not text or len(text) > 1024:
        raise InvalidHost("empty or oversized host")
    if any(c in text for c in "@/\\?#%") or any(ord(c) <= 0x20 or ord(c) == 0x7F for c in text):
        raise InvalidHost(f"host {text!r} contains userinfo, a path or control characters")
    if text.startswith("[") and text.endswith("]"):
        try:
            return ipaddress.IPv6Address(text[1:-1])
        except ValueError:
            raise InvalidHost(f"{text!r} is not an IPv6 address") from None
    if ":" in text:
        try:
            return ipaddress.IPv6Address(text)
        except ValueError:
            raise InvalidHost(f"{text!r} is not a host name") from None
    name = text[:-1] if text.endswith(".") else text
    try:
        name = name.encode("ascii").decode().lower()
    except UnicodeEncodeError:
        try:
            name = name.encode("idna").decode("ascii").lower()
        except UnicodeError:
            raise InvalidHost(f"{text!r} is not a valid internationalised name") from None
    labels = name.split(".")
    if _NUMERIC_LABEL.match(labels[-1]):
        # SECURITY: WHATWG URL parsers treat a numeric last label as IPv4; so do we, and a
        # numeric form inet_aton cannot read is refused rather than looked up as a name.
        try:
            return ipaddress.IPv4Address(socket.inet_aton(name))
        except OSError:
            raise InvalidHost(f"{text!r} looks like an IP address but is not one") from None
    if len(name) > _MAX_NAME or not all(_LABEL.match(label) for label in labels):
        raise InvalidHost(f"{text!r} is not a host name (letters, digits, hyphens and dots)")
    return name


def format_host(host: Host) -> str:
    """The host as it appears in a URL authority (IPv6 in brackets)."""
    if isinstance(host, ipaddress.IPv6Address):
        return f"[{host}]"
    return str(host)
