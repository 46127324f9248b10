"""Name resolution for the proxy: fixed overrides first, then the host's resolver.

The proxy resolves every name itself (the sandbox has no resolver at all) and returns all the
addresses, so the caller can check every one and dial exactly what it checked: a second
lookup, which DNS rebinding would exploit, never happens.
"""

from __future__ import annotations

import asyncio
import ipaddress
import socket
from collections.abc import Mapping, Sequence

from sandgate.egress.names import Host, IPAddress, canonical_host

__all__ = ["ResolutionFailed", "Resolver"]


class ResolutionFailed(Exception):
    """The name has no address (or the resolver failed)."""


class Resolver:
    def __init__(self, overrides: Mapping[str, Sequence[IPAddress]] | None = None) -> None:
        self._overrides: dict[Host, list[IPAddress]] = {
            canonical_host(name): list(addresses) for name, addresses in (overrides or {}).items()
        }

    async def resolve(self, host: Host, port: int) -> list[IPAddress]:
        """All addresses of ``host`` (canonical), in resolver order, without duplicates.

        Raises ``ResolutionFailed``."""
        if not isinstance(host, str):
            return [host]
        override = self._overrides.get(host)
        if override is not None:
            return list(override)
        loop = asyncio.get_running_loop()
        try:
            infos = await loop.getaddrinfo(
                host, port, type=socket.SOCK_STREAM, proto=socket.IPPROTO_TCP
            )
        except (socket.gaierror, UnicodeError) as exc:
            raise ResolutionFailed(f"{host}: {exc}") from None
        found: list[IPAddress] = []
        for family, *_, sockaddr in infos:
            if family not in (socket.AF_INET, socket.AF_INET6):
                continue
            address = ipaddress.ip_address(str(sockaddr[0]).split("%", 1)[0])
            if address not in found:
                found.append(address)
        if not found:
            raise ResolutionFailed(f"{host}: no address")
        return found
