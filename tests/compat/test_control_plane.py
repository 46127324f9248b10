"""Control-plane compatibility (issue #2): lifecycle, list filters, timeouts and error mapping,
driven through each pinned official SDK, plus raw-HTTP checks of the error contract.

Contract: shared/e2b-protocol.md §2.
"""

from __future__ import annotations

import re
import secrets

import httpx
import pytest

from tests.fixtures.server import RunningServer, ServerFactory

from .clients import PreparedClient
from .expect import assert_sdk_version, command_ok, failed_with, timestamp

pytestmark = pytest.mark.compat

CLOCK_SLACK_S = 5.0


def test_lifecycle(client: PreparedClient, runtime_e2b_env: dict[str, str]) -> None:
    tag = "lc" + secrets.token_hex(6)
    result = client.run("lifecycle", runtime_e2b_env, [tag])
    assert_sdk_version(result, client)
    sandbox_id = result["sandbox_id"]
    assert re.fullmatch(r"[a-z0-9]+", sandbox_id), sandbox_id

    command_ok(result["echo"], "hi\n")
    command_ok(result["echo_env"], "bar\n")

    for key in ("info", "info_static"):
        info = result[key]
        assert info["sandbox_id"] == sandbox_id, info
        assert info["name"] == "base", info
        assert info["template_id"], info
        assert info["metadata"] == {"suite": tag}, info
        assert info["state"] == "running", info
        assert timestamp(info["started_at"]) < timestamp(info["end_at"]), info

    listed = result["list_by_metadata"]
    assert [item["sandbox_id"] for item in listed] == [sandbox_id], listed
    assert listed[0]["metadata"] == {"suite": tag}, listed
    assert listed[0]["state"] == "running", listed
    assert sandbox_id in result["list_running_ids"]
    assert result["list_paused_by_metadata_ids"] == []

    end_at = timestamp(result["info_after_timeout"]["end_at"])
    assert result["set_timeout_before"] + 120 - CLOCK_SLACK_S <= end_at
    assert end_at <= result["set_timeout_after"] + 120 + CLOCK_SLACK_S

    assert result["connected_id"] == sandbox_id
    command_ok(result["connected_echo"], "connected\n")
    assert result["is_running_before_kill"] is True

    assert result["kill"] is True
    assert result["is_running_after_kill"] is False
    assert sandbox_id not in result["list_after_kill_ids"]
    assert result["cleanup"] == {"ok": True, "value": False}, "kill of a killed sandbox"


def test_errors(
    client: PreparedClient, sandgate_server: RunningServer, e2b_env: dict[str, str]
) -> None:
    revoked = sandgate_server.create_key(f"revoked-{secrets.token_hex(4)}")
    sandgate_server.revoke_key(revoked["id"])
    result = client.run("errors", e2b_env, [revoked["key"]])
    assert_sdk_version(result, client)

    unknown_template = failed_with(client, result["unknown_template"], "Sandbox")
    assert "template" in unknown_template["message"].lower(), unknown_template

    bad_key = failed_with(client, result["bad_key_create"], "Authentication")
    assert "unauthorized" in bad_key["message"].lower(), bad_key
    failed_with(client, result["bad_key_list"], "Authentication")
    revoked_error = failed_with(client, result["revoked_key_create"], "Authentication")
    assert revoked_error["message"] == bad_key["message"], "a revoked key must look unknown"

    assert result["kill_unknown"] == {"ok": True, "value": False}
    failed_with(client, result["connect_unknown"], "NotFound")
    failed_with(client, result["get_info_unknown"], "NotFound")

    out_of_range = failed_with(client, result["timeout_out_of_range"], "Sandbox")
    message = out_of_range["message"]
    assert message.startswith("400"), out_of_range
    assert "timeout" in message.lower(), out_of_range
    assert re.search(r"86[,_ ]?400", message), f"message should name the limit: {message}"

    exit_error = failed_with(client, result["command_exit"], "CommandExit")
    if client.lang == "python":
        assert exit_error["exit_code"] == 3, exit_error
    else:
        assert exit_error["exitCode"] == 3, exit_error
    assert exit_error["stdout"] == "out\n", exit_error
    assert exit_error["stderr"] == "oops\n", exit_error


CREATE_PATHS = ["/sandboxes", "/v2/sandboxes"]


def _assert_error_body(response: httpx.Response, status: int) -> str:
    assert response.status_code == status, (response.status_code, response.text)
    assert response.headers["content-type"].startswith("application/json"), response.headers
    body = response.json()
    assert body["code"] == status, body
    assert isinstance(body["message"], str) and body["message"], body
    return body["message"]


@pytest.mark.parametrize("path", CREATE_PATHS)
def test_malformed_json_is_400(sandgate_server: RunningServer, path: str) -> None:
    response = httpx.post(
        sandgate_server.url + path,
        content=b'{"templateID": "base",',
        headers={"X-API-KEY": sandgate_server.api_key, "Content-Type": "application/json"},
    )
    _assert_error_body(response, 400)


@pytest.mark.parametrize("path", CREATE_PATHS)
def test_oversized_body_is_413(sandgate_server: RunningServer, path: str) -> None:
    padding = "x" * (2 * 1024 * 1024)
    response = httpx.post(
        sandgate_server.url + path,
        content=f'{{"templateID": "base", "metadata": {{"pad": "{padding}"}}}}'.encode(),
        headers={"X-API-KEY": sandgate_server.api_key, "Content-Type": "application/json"},
    )
    _assert_error_body(response, 413)


@pytest.mark.parametrize("path", CREATE_PATHS)
@pytest.mark.parametrize(
    "headers",
    [{}, {"X-API-KEY": "e2b_" + "0" * 40}, {"X-API-KEY": "not-a-key"}],
    ids=["missing", "unknown", "malformed"],
)
def test_bad_api_key_is_401(
    sandgate_server: RunningServer, path: str, headers: dict[str, str]
) -> None:
    response = httpx.post(
        sandgate_server.url + path,
        json={"templateID": "base", "timeout": 30},
        headers=headers,
    )
    _assert_error_body(response, 401)


def test_api_key_survives_hard_restart(sandgate_server_factory: ServerFactory) -> None:
    server = sandgate_server_factory()
    headers = {"X-API-KEY": server.api_key}
    assert httpx.get(f"{server.url}/v2/sandboxes", headers=headers).status_code == 200
    server.restart(hard=True)
    response = httpx.get(f"{server.url}/v2/sandboxes", headers=headers)
    assert response.status_code == 200, response.text
    assert response.json() == []
    server.stop()


@pytest.fixture(scope="session")
def internet_server(sandgate_server_factory: ServerFactory) -> RunningServer:
    """A server whose ``allow_internet_access`` grants the ``internet`` preset."""
    return sandgate_server_factory(config={"egress": {"internet_access": ["internet"]}})


def test_allow_internet_access_reports_reachability(
    client: PreparedClient, e2b_env: dict[str, str], internet_server: RunningServer
) -> None:
    # The shared server has no egress rules: the SDKs' default (true) reaches nothing.
    offline = client.run("internet_flag", e2b_env)
    assert_sdk_version(offline, client)
    assert (offline["default"], offline["default_static"], offline["off"]) == (False, False, False)
    online = client.run("internet_flag", internet_server.env)
    assert (online["default"], online["default_static"], online["off"]) == (True, True, False)
