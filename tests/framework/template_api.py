"""The raw E2B template API as tests drive it: request a build, start it, poll it to the end.

Shared by the security and integration tests of team templates (issue 18); the SDK scenarios
drive the same routes through the official clients.
"""

from __future__ import annotations

import json
import secrets
import time
from typing import Any

import httpx

from tests.fixtures.server import RunningServer

__all__ = ["api", "new_team_api", "start_build", "wait_build"]

POLL_S = 0.2
BUILD_TIMEOUT_S = 300


def api(server: RunningServer, key: str) -> httpx.Client:
    return httpx.Client(base_url=server.url, headers={"X-API-Key": key}, timeout=60)


def new_team_api(server: RunningServer, prefix: str) -> tuple[str, httpx.Client]:
    """A client with a key of a new team (named uniquely: layer caches are per team and
    outlive one test run, so a reused team name would find its layers from an earlier run)."""
    team = f"{prefix}-{secrets.token_hex(4)}"
    created = server.cli("keys", "create", "--name", team, "--team", team, "--json")
    line = [row for row in created.stdout.splitlines() if row.startswith("{")][-1]
    return team, api(server, json.loads(line)["key"])


def start_build(client: httpx.Client, name: str, body: dict[str, Any]) -> tuple[str, str]:
    """Requests a build of ``name`` and starts it with ``body`` (a ``TemplateBuildStartV2``);
    returns ``(template id, build id)``."""
    created = client.post("/v3/templates", json={"name": name})
    assert created.status_code == 202, created.text
    ids = created.json()
    started = client.post(f"/v2/templates/{ids['templateID']}/builds/{ids['buildID']}", json=body)
    assert started.status_code == 202, started.text
    return ids["templateID"], ids["buildID"]


def wait_build(client: httpx.Client, template_id: str, build_id: str) -> dict[str, Any]:
    """Polls the build until it is ``ready`` or ``error``; returns the last status with every
    log entry of the build."""
    deadline = time.monotonic() + BUILD_TIMEOUT_S
    entries: list[dict[str, Any]] = []
    while time.monotonic() < deadline:
        response = client.get(
            f"/templates/{template_id}/builds/{build_id}/status",
            params={"logsOffset": len(entries)},
        )
        assert response.status_code == 200, response.text
        status: dict[str, Any] = response.json()
        entries += status["logEntries"]
        if status["status"] in ("ready", "error"):
            status["logEntries"] = entries
            return status
        time.sleep(POLL_S)
    raise AssertionError(f"build {build_id} never ended")
