"""Raw HTTP access to one sandbox's data plane, for adversarial tests that must send what no SDK
would (NUL bytes, hostile paths, stalled streams) and see the exact status and body.

Speaks the same wire format as the SDKs (shared/e2b-protocol.md §3): unary Connect JSON,
enveloped server streams, ``/files``. Also measures the gateway process from the host.
"""

from __future__ import annotations

import base64
import json
import struct
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from tests.framework.envd import CommandResult, create, envd_headers, run

_ENVELOPE = struct.Struct(">BI")
FLAG_END = 0x02


def basic_user(user: str) -> dict[str, str]:
    return {"authorization": "Basic " + base64.b64encode(f"{user}:".encode()).decode()}


def envelope(message: dict[str, Any]) -> bytes:
    payload = json.dumps(message).encode()
    return _ENVELOPE.pack(0, len(payload)) + payload


class Envelopes:
    """Splits a byte stream into Connect envelopes: ``(flags, message)`` pairs."""

    def __init__(self) -> None:
        self._buffer = bytearray()

    def feed(self, chunk: bytes) -> Iterator[tuple[int, dict[str, Any]]]:
        self._buffer.extend(chunk)
        while len(self._buffer) >= _ENVELOPE.size:
            flags, length = _ENVELOPE.unpack_from(self._buffer)
            if len(self._buffer) < _ENVELOPE.size + length:
                return
            payload = bytes(self._buffer[_ENVELOPE.size : _ENVELOPE.size + length])
            del self._buffer[: _ENVELOPE.size + length]
            yield flags, json.loads(payload)


@dataclass
class SandboxHttp:
    """One sandbox reached through the gateway with its routing headers and access token."""

    url: str
    api_key: str
    sandbox_id: str
    token: str
    http: httpx.Client = field(default_factory=lambda: httpx.Client(timeout=60))

    @property
    def headers(self) -> dict[str, str]:
        return envd_headers(self.sandbox_id, self.token)

    def run(self, command: str, *, user: str | None = None) -> CommandResult:
        return run(self.url, self.sandbox_id, self.token, command, user=user, client=self.http)

    def sh(self, command: str, *, user: str | None = None) -> str:
        """Runs ``command``; asserts it exits 0; returns its stdout."""
        result = self.run(command, user=user)
        assert result.exit_code == 0, f"{command!r} failed: {result}"
        return result.stdout

    def get_file(
        self, path: str, *, user: str | None = None, timeout: float = 30, **kwargs: Any
    ) -> httpx.Response:
        params = {"path": path, **({"username": user} if user else {})}
        return self.http.get(
            f"{self.url}/files",
            params=params,
            headers={**self.headers, **kwargs.pop("headers", {})},
            timeout=timeout,
            **kwargs,
        )

    def get_file_raw_query(self, query: str, *, timeout: float = 30) -> httpx.Response:
        """``GET /files?<query>`` with the query sent byte for byte as given."""
        return self.http.get(f"{self.url}/files?{query}", headers=self.headers, timeout=timeout)

    def put_file(
        self,
        path: str,
        data: bytes | Iterator[bytes],
        *,
        user: str | None = None,
        headers: dict[str, str] | None = None,
        timeout: float = 120,
    ) -> httpx.Response:
        params = {"path": path, **({"username": user} if user else {})}
        return self.http.post(
            f"{self.url}/files",
            params=params,
            content=data,
            headers={
                **self.headers,
                "content-type": "application/octet-stream",
                **(headers or {}),
            },
            timeout=timeout,
        )

    def rpc(
        self, method: str, body: dict[str, Any], *, user: str | None = None, timeout: float = 30
    ) -> httpx.Response:
        """A unary Connect call, e.g. ``rpc("filesystem.Filesystem/Stat", {"path": ...})``."""
        return self.http.post(
            f"{self.url}/{method}",
            json=body,
            headers={
                **self.headers,
                "connect-protocol-version": "1",
                **(basic_user(user) if user else {}),
            },
            timeout=timeout,
        )

    @contextmanager
    def stream(
        self,
        method: str,
        body: dict[str, Any],
        *,
        user: str | None = None,
        headers: dict[str, str] | None = None,
        timeout: float = 60,
    ) -> Iterator[httpx.Response]:
        """A server-streaming Connect call; yields the open response (body not read)."""
        with self.http.stream(
            "POST",
            f"{self.url}/{method}",
            content=envelope(body),
            headers={
                **self.headers,
                "content-type": "application/connect+json",
                "connect-protocol-version": "1",
                **(basic_user(user) if user else {}),
                **(headers or {}),
            },
            timeout=timeout,
        ) as response:
            yield response

    def start(
        self,
        command: str,
        *,
        user: str | None = None,
        cwd: str | None = None,
        envs: dict[str, str] | None = None,
        headers: dict[str, str] | None = None,
        timeout: float = 60,
    ) -> StreamResult:
        """``process.Process/Start`` of ``bash -l -c command``, read to the end."""
        process: dict[str, Any] = {"cmd": "/bin/bash", "args": ["-l", "-c", command]}
        if cwd is not None:
            process["cwd"] = cwd
        if envs is not None:
            process["envs"] = envs
        with self.stream(
            "process.Process/Start",
            {"process": process, "stdin": False},
            user=user,
            headers=headers,
            timeout=timeout,
        ) as response:
            return StreamResult.read(response)

    def kill(self) -> None:
        self.http.delete(
            f"{self.url}/sandboxes/{self.sandbox_id}", headers={"X-API-Key": self.api_key}
        )
        self.http.close()


@dataclass
class StreamResult:
    """A process stream read to its end: HTTP status, the events and the end-of-stream error."""

    status: int
    content_type: str
    events: list[dict[str, Any]]
    end_error: dict[str, Any] | None
    body: bytes
    stdout: bytes = b""
    stderr: bytes = b""

    @classmethod
    def read(cls, response: httpx.Response) -> StreamResult:
        if response.status_code != 200:
            body = response.read()
            return cls(
                response.status_code, response.headers.get("content-type", ""), [], None, body
            )
        events: list[dict[str, Any]] = []
        end_error = None
        splitter = Envelopes()
        stdout, stderr = bytearray(), bytearray()
        for chunk in response.iter_bytes():
            for flags, message in splitter.feed(chunk):
                if flags & FLAG_END:
                    end_error = message.get("error")
                    continue
                event = message.get("event", {})
                data = event.get("data", {})
                stdout.extend(base64.b64decode(data.get("stdout", "")))
                stderr.extend(base64.b64decode(data.get("stderr", "")))
                if "data" not in event:
                    events.append(event)
        return cls(
            200,
            response.headers.get("content-type", ""),
            events,
            end_error,
            b"",
            bytes(stdout),
            bytes(stderr),
        )

    @property
    def end(self) -> dict[str, Any] | None:
        return next((e["end"] for e in self.events if "end" in e), None)


def open_sandbox(url: str, api_key: str, **body: Any) -> SandboxHttp:
    created = create(url, api_key, **{"timeout": 600, **body})
    return SandboxHttp(url, api_key, created["sandboxID"], created["envdAccessToken"])


def rss_bytes(pid: int) -> int:
    """Resident set size of a host process, from ``/proc/<pid>/status``."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise AssertionError(f"no VmRSS for pid {pid}")


def wait_for(check: Callable[[], Any], timeout: float, what: str) -> Any:
    """Polls ``check`` until truthy; fails with ``what`` after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        time.sleep(0.05)
