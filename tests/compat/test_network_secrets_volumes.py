"""Network updates, team secrets and volumes (issue 13) through each pinned official SDK, on
every runtime (contract: shared/e2b-protocol.md §2.3-2.4; docs/compatibility.md).

One server per runtime with the egress fixtures of tests/fixtures: a plain-HTTP upstream on
``one.api.test`` (reachable only through ``network.allowOut``, within ``egress.api_allow_out``)
and an HTTPS echo upstream on ``bound.test`` (operator-allowed; the proxy trusts its CA and
applies header rules on its port). SDKs without ``Secret`` (2.31) drive the same routes over
raw HTTP, as the newest SDK calls them.
"""

from __future__ import annotations

import secrets
from collections.abc import Callable
from typing import Any

import pytest

from tests.fixtures.egress import Upstream, egress_config, upstream
from tests.fixtures.server import RunningServer
from tests.fixtures.tls_upstream import TlsUpstream, tls_upstream

from .clients import PreparedClient
from .expect import assert_sdk_version, failed_with

__all__ = ["tls_upstream", "upstream"]

pytestmark = [pytest.mark.compat, pytest.mark.one_runtime_per_client]


@pytest.fixture(scope="module")
def server(
    upstream: Upstream,
    tls_upstream: TlsUpstream,
    runtime_server_factory: Callable[..., RunningServer],
) -> RunningServer:
    config = egress_config(upstream.port)
    egress = config["egress"]
    egress["resolve_overrides"]["bound.test"] = ["127.0.0.1"]
    egress["allow"].append(
        {"host": "bound.test", "ports": [tls_upstream.port], "addresses": ["127.0.0.1/32"]}
    )
    egress["upstream_ca_file"] = str(tls_upstream.ca_file)
    egress["transform_ports"] = [tls_upstream.port]
    return runtime_server_factory(config={**config, "limits": {"volume_mib": 64}})


def _tag(client: PreparedClient) -> str:
    return f"{client.name.replace('.', '-')}-{secrets.token_hex(3)}"


def test_update_network(client: PreparedClient, server: RunningServer, upstream: Upstream) -> None:
    url = f"http://one.api.test:{upstream.port}/compat-{_tag(client)}"
    result = client.run("network_update", server.env, [url, "one.api.test"])
    assert_sdk_version(result, client)
    assert (result["before"], result["opened"]) == ("403", "200")
    assert result["info_allow_out"] == ["one.api.test"]
    refused = failed_with(client, result["beyond_ceiling"], "Sandbox")
    assert "api_allow_out" in refused["message"], refused
    assert (result["still_open"], result["closed"]) == ("200", "403")
    failed_with(client, result["unknown_sandbox"], "NotFound")


def test_secrets(client: PreparedClient, server: RunningServer, tls_upstream: TlsUpstream) -> None:
    name = f"Compat-{_tag(client)}"
    value, rotated = f"CANARY-{secrets.token_hex(8)}", f"ROTATED-{secrets.token_hex(8)}"
    path = f"/headers?{name.lower()}"
    url = f"https://bound.test:{tls_upstream.port}{path}"
    result = client.run("team_secrets", server.env, [name, value, rotated, "bound.test", url])
    assert_sdk_version(result, client)
    assert result["sdk_secret"] == (client.name in ("py-e2b-2.63.0", "js-e2b-2.51.0"))
    created = result["created"]
    assert (created["name"], created["version"], created["metadata"]) == (
        name.lower(),
        1,
        {"team": "compat"},
    )
    assert created["id"].startswith("sec_")
    assert not {"value", "secretValue"} & set(created["fields"]), created
    assert result["by_name"]["id"] == created["id"]
    assert result["updated"]["version"] == 2
    assert name.lower() in result["listed"] and result["exists"] is True
    # The rule put the current value in the bound host's request; the sandbox saw neither.
    assert tls_upstream.seen(path)[-1]["authorization"] == f"Bearer {rotated}"
    request = result["request"]
    assert request["exit_code"] == 0, request
    assert value not in request["stdout"] and rotated not in request["stdout"]
    assert f"Bearer {'*' * len(rotated)}" in request["stdout"]
    assert result["env_has_value"] is False
    assert (result["destroyed"], result["destroyed_again"], result["exists_after"]) == (
        True,
        False,
        False,
    )
    if result["sdk_secret"]:
        failed_with(client, result["get_after"], "SecretNotFound")
    else:
        assert result["get_after"]["status"] == 404
    assert value not in server.log_text() and rotated not in server.log_text()


def test_volumes(client: PreparedClient, server: RunningServer) -> None:
    name = f"vol-{_tag(client)}"
    result = client.run("volumes", server.env, [name])
    assert_sdk_version(result, client)
    assert result["created"] == {"name": name, "has_token": True}
    written = result["write"]
    assert (written["name"], written["type"], written["path"], written["size"]) == (
        "hello.txt",
        "file",
        "/docs/hello.txt",
        5,
    )
    assert (written["uid"], written["gid"], written["mode"]) == (1000, 1000, 0o644)
    _not_found(result["write_no_parent"])
    assert (result["make_dir"]["type"], result["make_dir"]["path"]) == ("directory", "/docs/sub")
    assert result["list"] == ["hello.txt", "sub"]
    assert result["stat"]["size"] == 5
    assert result["exists"] == [True, False]
    assert result["chmod"]["mode"] == 0o640
    assert result["read"] == "hello"
    _not_found(result["read_missing"])
    assert result["inside"] == "hello\nuser 644\n"
    assert result["info_mounts"] == [{"name": name, "path": "/mnt/vol"}]
    refused = failed_with(client, result["destroy_mounted"], "Volume")
    assert "409" in refused["message"] or "mounted" in refused["message"], refused
    assert result["read_back"] == "inside\n"
    assert result["listed"] is True
    assert (result["info_by_id"], result["connect"]) == (name, "hello")
    assert result["removed"] is False
    assert (result["destroyed"], result["destroyed_again"]) == (True, False)
    _not_found(result["info_after"])


def _not_found(outcome: dict[str, Any]) -> None:
    """A not-found failure of the SDK's own naming: ``NotFoundException`` (py 2.31),
    ``VolumePathNotFoundException``/``VolumeNotFoundError`` and the like (newer SDKs)."""
    assert outcome["ok"] is False, outcome
    assert any("NotFound" in name for name in outcome["error"]["classes"]), outcome
