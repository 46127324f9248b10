"""A server with a tool-gateway config, and sandboxes acting as its agents."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.fixtures.server import RunningServer, ServerFactory, free_port
from tests.framework.envd import CommandResult, create, run

#: The ``sleeper`` tool's sleep; the tool writes the host pids of its two processes to
#: ``SLEEPER_PIDS``, so the test checks exactly those (and nothing else on the host) are gone.
SLEEP_S = "30"
SLEEPER_PIDS = Path(f"/tmp/sandgate-test-sleeper-{os.getpid()}-{time.monotonic_ns()}.pids")

GATEWAY_CONFIG = """
agents:
  - id: data-analyst
  - id: writer
  - id: limited
  - id: approver-test
  - id: nobody
secrets:
  CANARY:
    env: SANDGATE_TEST_CANARY
tools:
  - name: kv
    kind: builtin
  - name: echo_secret
    kind: exec
    description: Echoes its argument and the secret it was given.
    command:
      - /bin/sh
      - -c
      - printf '{"got"':' "%s", "secret"':' "%s"}' "$1" "$CANARY"
      - sh
      - "{text}"
    parameters:
      type: object
      properties:
        text: {type: string}
      required: [text]
    secrets: [CANARY]
  - name: sleeper
    kind: exec
    command: ["/bin/sh", "-c", "sleep {sleep_s} & echo $! $$ > {pids}; exec sleep {sleep_s}"]
    timeout_s: 1
  - name: big
    kind: exec
    command: ["/bin/sh", "-c", "head -c 5000000 /dev/zero | tr '\\\\0' a"]
    output_limit: 1024
  - name: mstdio
    kind: mcp
    transport: stdio
    command: ["{python}", "{mcp_server}"]
  - name: mhttp
    kind: mcp
    transport: http
    url: "http://127.0.0.1:{mcp_port}/mcp"
policy:
  rules:
    - id: analyst-read
      effect: allow
      subject: {agent: data-analyst}
      tool: kv
      action: [get, list]
    - id: analyst-no-write
      effect: deny
      subject: {agent: data-analyst}
      tool: kv
      action: set
    - id: writer-all
      effect: allow
      subject: {agent: writer}
      tool: [kv, echo_secret, sleeper, big, "mstdio_*", "mhttp_*"]
    - id: limited-kv
      effect: allow
      subject: {agent: limited}
      tool: kv
      rate_limit: {calls: 3, window_s: 3600}
    - id: ask-quick
      effect: ask
      subject: {agent: approver-test}
      tool: kv
      action: set
      args: {key: {glob: "timeout:*"}}
    - id: ask-writes
      effect: ask
      subject: {agent: approver-test}
      tool: kv
      action: set
      approval_timeout_s: 120
    - id: approver-reads
      effect: allow
      subject: {agent: approver-test}
      tool: kv
approvals:
  timeout_s: 4
"""

CANARY = "CANARY-7f3e9b21d4c8a6"


MCP_SERVER = Path(__file__).with_name("mcp_server.py")


@pytest.fixture(scope="session")
def mcp_http_port() -> Iterator[int]:
    """A streamable-HTTP MCP server (official SDK) started by the test session."""
    port = free_port()
    process = subprocess.Popen(
        [sys.executable, str(MCP_SERVER), "http", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 30
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            break
        except OSError:
            if time.monotonic() > deadline or process.poll() is not None:
                process.kill()
                raise AssertionError("the MCP test server did not start") from None
            time.sleep(0.05)
    yield port
    process.terminate()
    process.wait(10)


@pytest.fixture(scope="session")
def tools_server(sandgate_server_factory: ServerFactory, mcp_http_port: int) -> RunningServer:
    config = (
        GATEWAY_CONFIG.replace("{python}", sys.executable)
        .replace("{sleep_s}", SLEEP_S)
        .replace("{pids}", str(SLEEPER_PIDS))
        .replace("{mcp_server}", str(MCP_SERVER))
        .replace("{mcp_port}", str(mcp_http_port))
    )
    return sandgate_server_factory(config=config, extra_env={"SANDGATE_TEST_CANARY": CANARY})


Runner = Callable[[str], CommandResult]


@pytest.fixture
def agent_sandbox(tools_server: RunningServer) -> Iterator[Callable[[str], tuple[str, Runner]]]:
    """``make(agent)`` → (sandbox id, run(command)) for a sandbox acting as ``agent``."""
    created: list[dict[str, Any]] = []

    def make(agent: str) -> tuple[str, Runner]:
        box = create(
            tools_server.url, tools_server.api_key, timeout=300, metadata={"sandgate.agent": agent}
        )
        created.append(box)

        def runner(command: str) -> CommandResult:
            return run(tools_server.url, box["sandboxID"], box["envdAccessToken"], command)

        return box["sandboxID"], runner

    yield make
    for box in created:
        httpx.delete(
            f"{tools_server.url}/sandboxes/{box['sandboxID']}",
            headers={"X-API-Key": tools_server.api_key},
        )
