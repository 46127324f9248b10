"""Team templates over the raw E2B template API: what one team builds no other team sees, and
a build a gateway crash interrupts ends ``error`` with its log kept (issue 18, part A).

Builds start from the shipped ``base`` and run one short step, on the default (Docker) server.
"""

from __future__ import annotations

import json
import time
from typing import Any

import httpx
import pytest

from tests.fixtures.server import RunningServer, ServerFactory

pytestmark = pytest.mark.docker

POLL_S = 0.2
BUILD_TIMEOUT_S = 300


def _api(server: RunningServer, key: str) -> httpx.Client:
    return httpx.Client(base_url=server.url, headers={"X-API-Key": key}, timeout=60)


def _start_build(api: httpx.Client, name: str, command: str) -> tuple[str, str]:
    created = api.post("/v3/templates", json={"name": name})
    assert created.status_code == 202, created.text
    body = created.json()
    started = api.post(
        f"/v2/templates/{body['templateID']}/builds/{body['buildID']}",
        json={"fromTemplate": "base", "steps": [{"type": "RUN", "args": [command]}]},
    )
    assert started.status_code == 202, started.text
    return body["templateID"], body["buildID"]


def _status(api: httpx.Client, template_id: str, build_id: str) -> dict[str, Any]:
    response = api.get(f"/templates/{template_id}/builds/{build_id}/status")
    assert response.status_code == 200, response.text
    result: dict[str, Any] = response.json()
    return result


def _wait(api: httpx.Client, template_id: str, build_id: str, states: set[str]) -> dict[str, Any]:
    deadline = time.monotonic() + BUILD_TIMEOUT_S
    while time.monotonic() < deadline:
        status = _status(api, template_id, build_id)
        if status["status"] in states:
            return status
        time.sleep(POLL_S)
    raise AssertionError(f"build {build_id} never reached {states}")


def test_a_team_template_is_invisible_to_other_teams(sandgate_server: RunningServer) -> None:
    other = sandgate_server.cli(
        "keys", "create", "--name", "other", "--team", "other-team", "--json"
    )
    other_key = [line for line in other.stdout.splitlines() if line.startswith("{")][-1]
    other_api = _api(sandgate_server, json.loads(other_key)["key"])
    own_api = _api(sandgate_server, sandgate_server.api_key)
    template_id, build_id = _start_build(own_api, "team-only", "echo team-only > /tmp/mark")
    assert _wait(own_api, template_id, build_id, {"ready", "error"})["status"] == "ready"

    assert own_api.get("/templates/aliases/team-only").status_code == 200
    assert other_api.get("/templates/aliases/team-only").status_code == 403
    own_names = [t["aliases"] for t in own_api.get("/templates").json()]
    other_names = [t["aliases"] for t in other_api.get("/templates").json()]
    assert ["team-only"] in own_names and ["base"] in own_names
    assert ["team-only"] not in other_names and ["base"] in other_names
    for ref in ("team-only", template_id):
        created = other_api.post("/sandboxes", json={"templateID": ref, "timeout": 60})
        assert created.status_code == 404, created.text
        assert other_api.get(f"/templates/{ref}").status_code == 404
        assert other_api.delete(f"/templates/{ref}").status_code == 404
    assert other_api.get(f"/templates/{template_id}/builds/{build_id}/status").status_code == 404
    # The shipped templates are every team's and nobody's to change.
    assert other_api.delete("/templates/base").status_code == 403
    assert own_api.delete(f"/templates/{template_id}").status_code == 204
    assert own_api.get("/templates/aliases/team-only").status_code == 404


def test_a_build_interrupted_by_a_crash_ends_in_error_with_its_log(
    sandgate_server_factory: ServerFactory,
) -> None:
    server = sandgate_server_factory()
    api = _api(server, server.api_key)
    template_id, build_id = _start_build(api, "crashy", "echo started-step; sleep 600")
    deadline = time.monotonic() + BUILD_TIMEOUT_S
    while "started-step" not in [
        e["message"] for e in _status(api, template_id, build_id)["logEntries"]
    ]:
        assert time.monotonic() < deadline, "the step never started"
        time.sleep(POLL_S)
    server.restart(hard=True)
    api = _api(server, server.api_key)
    status = _status(api, template_id, build_id)
    assert status["status"] == "error", status
    assert "restarted while this build ran" in status["reason"]["message"], status
    messages = [entry["message"] for entry in status["logEntries"]]
    assert "started-step" in messages, messages
    # Offsets keep counting across the restart: nothing repeated, nothing lost.
    tail = api.get(
        f"/templates/{template_id}/builds/{build_id}/status",
        params={"logsOffset": len(messages) - 1},
    ).json()
    assert [e["message"] for e in tail["logEntries"]] == messages[-1:]
