"""Which resolved addresses the proxy may dial.

Rule: only globally routable unicast addresses, unless the matching egress rule lists a
network (``addresses``) that contains the address; metadata endpoints never. IPv6 forms that
embed an IPv4 address (mapped, NAT64, 6to4) are judged by the embedded address too. The list
is explicit rather than trusting ``ipaddress.is_global`` alone, whose answers changed across
Python releases (CVE-2024-4032).
"""

from __future__ import annotations

import ipaddress
from collections.abc import Sequence
from typing import Final

from sandgate.egress.names import IPAddress

__all__ = ["METADATA_ADDRESSES", "address_refusal"]

Network = ipaddress.IPv4Network | ipaddress.IPv6Network

#: Cloud instance metadata endpoints (AWS/GCP/Azure/OCI, AWS ECS, Alibaba, AWS IPv6).
METADATA_ADDRESSES: Final[frozenset[IPAddress]] = frozenset(
    ipaddress.ip_address(a)
    for a in ("169.254.169.254", "169.254.170.2", "100.100.100.200", "fd00:ec2::254")
)

_NOT_PUBLIC: Final[tuple[Network, ...]] = tuple(
    ipaddress.ip_network(n)
    for n in (
        "0.0.0.0/8",
        "10.0.0.0/8",
        "100.64.0.0/10",
        "127.0.0.0/8",
        "169.254.0.0/16",
        "172.16.0.0/12",
        "192.0.0.0/24",
        "192.0.2.0/24",
        "192.168.0.0/16",
        "198.18.0.0/15",
        "198.51.100.0/24",
        "203.0.113.0/24",
        "224.0.0.0/4",
        "240.0.0.0/4",
        "::/128",
        "::1/128",
        "::ffff:0:0/96",
        "64:ff9b::/96",
        "64:ff9b:1::/48",
        "100::/64",
        "2001:db8::/32",
        "2002::/16",
        "fc00::/7",
        "fe80::/10",
        "ff00::/8",
    )
)


def _embedded_v4(address: IPAddress) -> ipaddress.IPv4Address | None:
    if not isinstance(address, ipaddress.IPv6Address):
        return None
    if address.ipv4_mapped is not None:
        return address.ipv4_mapped
    if address.sixtofour is not None:
        return address.sixtofour
    if address in ipaddress.IPv6Network("64:ff9b::/96"):
        return ipaddress.IPv4Address(int(address) & 0xFFFFFFFF)
    return None


def _public(address: IPAddress) -> bool:
    if any(address in net for net in _NOT_PUBLIC if net.version == address.version):
        return False
    return address.is_global and not address.is_multicast


def address_refusal(address: IPAddress, allowed: Sequence[Network]) -> str | None:
    """Why ``address`` must not be dialled (``metadata_address``, ``resolved_to_private``),
    or None; ``allowed`` are the networks the matching rule explicitly permits."""
    embedded = _embedded_v4(address)
    # SECURITY: metadata is refused before the rule's own networks are consulted, so no
    # configuration (or rebinding answer) reaches it.
    if address in METADATA_ADDRESSES or (embedded is not None and embedded in METADATA_ADDRESSES):
        return "metadata_address"
    if any(address in net for net in allowed if net.version == address.version):
        return None
    if not _public(address) or (embedded is not None and not _public(embedded)):
        return "resolved_to_private"
    return None
