"""``http_fetch``: fetch a URL from the gateway, only from allow-listed domains.

Until the egress proxy exists, this tool is its own gate: the scheme must be http(s), the host
must match ``allow_domains`` (exact, or ``*.example.com`` for subdomains), and every address
the name resolves to must be public, so an allow-listed name that points at 127.0.0.1 or
169.254.169.254 is refused (GW-08). Redirects are not followed. An empty allow list refuses
everything.
"""

from __future__ import annotations

import asyncio
import ipaddress
import socket
from fnmatch import fnmatchcase
from typing import Any
from urllib.parse import urlsplit

import httpx

from sandgate._outbound_tls import outbound_context_async
from sandgate.errors import PolicyDenied, ToolFailed, ToolTimeout
from sandgate.tools.executors._output import TRUNCATION_MARKER
from sandgate.tools.tool import ToolContext

DESCRIPTION = "Fetch a web page or API response (GET) from an allow-listed domain."
ACTION = None
PARAMETERS: dict[str, Any] = {
    "type": "object",
    "properties": {"url": {"type": "string", "description": "An http(s) URL.", "maxLength": 4096}},
    "required": ["url"],
    "additionalProperties": False,
}
IDEMPOTENT = True


class HttpFetchExecutor:
    def __init__(self, allow_domains: list[str]) -> None:
        self._allow = [d.lower().rstrip(".") for d in allow_domains]

    async def run(self, arguments: dict[str, Any], context: ToolContext) -> Any:
        url = arguments["url"]
        parts = urlsplit(url)
        host = (parts.hostname or "").lower().rstrip(".")
        if parts.scheme not in ("http", "https") or not host:
            raise PolicyDenied(f"http_fetch: only http(s) URLs are allowed, not {url[:100]!r}")
        if not any(fnmatchcase(host, pattern) for pattern in self._allow):
            raise PolicyDenied(f"http_fetch: {host} is not in the tool's allow_domains")
        await _refuse_private(host, parts.port or (443 if parts.scheme == "https" else 80))
        try:
            async with httpx.AsyncClient(
                timeout=context.timeout_s,
                follow_redirects=False,
                trust_env=False,
                verify=await outbound_context_async(),
            ) as client:
                response = await client.get(url)
        except httpx.TimeoutException:
            raise ToolTimeout(f"http_fetch: {host} did not answer in time") from None
        except httpx.HTTPError as exc:
            raise ToolFailed(f"http_fetch: {exc}") from None
        text = response.text
        if len(text) > context.output_limit:
            text = text[: context.output_limit] + TRUNCATION_MARKER.format(
                limit=context.output_limit
            )
        return {"status": response.status_code, "headers": dict(response.headers), "body": text}


async def _refuse_private(host: str, port: int) -> None:
    try:
        infos = await asyncio.get_running_loop().getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except OSError:
        raise ToolFailed(f"http_fetch: cannot resolve {host}") from None
    for info in infos:
        address = ipaddress.ip_address(info[4][0])
        if not address.is_global:
            raise PolicyDenied(f"http_fetch: {host} resolves to a non-public address")
