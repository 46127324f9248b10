"""A deliberately small Connect+JSON client for integration tests that are not about SDK
compatibility (those use the official SDKs in tests/compat). It speaks the same wire format."""

from __future__ import annotations

import base64
import json
import struct
from dataclasses import dataclass
from typing import Any

import httpx


@dataclass(frozen=True)
class CommandResult:
    exit_code: int
    stdout: str
    stderr: str
    end_error: dict[str, Any] | None


def envd_headers(sandbox_id: str, token: str | None) -> dict[str, str]:
    headers = {"E2b-Sandbox-Id": sandbox_id, "E2b-Sandbox-Port": "49983"}
    if token is not None:
        headers["X-Access-Token"] = token
    return headers


def run(
    url: str,
    sandbox_id: str,
    token: str | None,
    command: str,
    *,
    user: str | None = None,
    timeout_ms: int | None = None,
    client: httpx.Client | None = None,
    envs: dict[str, str] | None = None,
) -> CommandResult:
    """Runs ``bash -l -c command`` like ``commands.run`` does and collects its output.

    ``client`` reuses a connection pool (and its TLS context) as an SDK does; without one,
    each call builds its own client (tens of ms on a small VM, most of it the SSL context)."""
    process: dict[str, Any] = {"cmd": "/bin/bash", "args": ["-l", "-c", command]}
    if envs:
        process["envs"] = envs
    payload = json.dumps({"process": process, "stdin": False}).encode()
    headers = {
        **envd_headers(sandbox_id, token),
        "content-type": "application/connect+json",
        "connect-protocol-version": "1",
    }
    if user is not None:
        headers["authorization"] = "Basic " + base64.b64encode(f"{user}:".encode()).decode()
    if timeout_ms is not None:
        headers["connect-timeout-ms"] = str(timeout_ms)
    body = struct.pack(">BI", 0, len(payload)) + payload
    response = (client or httpx).post(
        f"{url}/process.Process/Start", content=body, headers=headers, timeout=60
    )
    if response.status_code != 200:
        raise AssertionError(f"Start answered {response.status_code}: {response.text}")
    data = response.content
    # Pieces joined once at the end: appending to bytes copies all of it every time, which
    # made a large output's collection quadratic (seconds of CPU per 10 MiB).
    stdout: list[bytes] = []
    stderr: list[bytes] = []
    exit_code, end_error = None, None
    offset = 0
    while offset < len(data):
        flags, length = struct.unpack_from(">BI", data, offset)
        message = json.loads(data[offset + 5 : offset + 5 + length])
        offset += 5 + length
        if flags & 0x02:
            end_error = message.get("error")
            continue
        event = message.get("event", {})
        if "data" in event:
            stdout.append(base64.b64decode(event["data"].get("stdout", "")))
            stderr.append(base64.b64decode(event["data"].get("stderr", "")))
        if "end" in event:
            exit_code = int(event["end"].get("exitCode", 0))
    return CommandResult(
        exit_code if exit_code is not None else -1,
        b"".join(stdout).decode(),
        b"".join(stderr).decode(),
        end_error,
    )


def create(
    url: str, api_key: str, *, client: httpx.Client | None = None, **body: Any
) -> dict[str, Any]:
    payload = {"templateID": "base", **body}
    response = (client or httpx).post(
        f"{url}/v2/sandboxes", json=payload, headers={"X-API-Key": api_key}, timeout=120
    )
    if response.status_code != 201:
        raise AssertionError(f"create answered {response.status_code}: {response.text}")
    result: dict[str, Any] = response.json()
    return result
