"""``http`` tools: a request template filled from the validated arguments and the tool's
secrets. Path and query values are percent-encoded; header values may not contain line
breaks. Redirects are not followed (a redirect is returned as a failure), so a configured
endpoint cannot bounce the call, with its secrets, somewhere else."""

from __future__ import annotations

from typing import Any
from urllib.parse import quote

import httpx

from sandgate._outbound_tls import outbound_context_async
from sandgate.errors import InvalidArguments, ToolFailed, ToolTimeout
from sandgate.tools.executors._template import fill, fill_json
from sandgate.tools.tool import ToolContext

__all__ = ["HttpExecutor"]


class HttpExecutor:
    def __init__(self, method: str, url: str, headers: dict[str, str], body: Any) -> None:
        self._method = method
        self._url = url
        self._headers = headers
        self._body = body

    async def run(self, arguments: dict[str, Any], context: ToolContext) -> Any:
        url = fill(self._url, arguments, context.secrets, lambda v: quote(v, safe=""))
        headers = {}
        for name, template in self._headers.items():
            value = fill(template, arguments, context.secrets)
            if "\r" in value or "\n" in value:
                raise InvalidArguments(f"header {name} would contain a line break")
            headers[name] = value
        body = None if self._body is None else fill_json(self._body, arguments, context.secrets)
        try:
            async with httpx.AsyncClient(
                timeout=context.timeout_s,
                follow_redirects=False,
                trust_env=False,
                verify=await outbound_context_async(),
            ) as client:
                response = await client.request(self._method, url, headers=headers, json=body)
        except httpx.TimeoutException:
            raise ToolTimeout(f"{context.tool}: the request timed out") from None
        except httpx.HTTPError as exc:
            raise ToolFailed(f"{context.tool}: request failed: {exc}") from None
        if response.status_code >= 300:
            raise ToolFailed(f"{context.tool}: HTTP {response.status_code}: {response.text[:1000]}")
        try:
            return response.json()
        except ValueError:
            return response.text
