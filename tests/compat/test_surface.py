"""The last of E2B's surface (issue 13) through each pinned official SDK, on docker and bwrap:
refreshes through the SDKs' generated control-plane clients (Python and JS), and, through the
JS SDK's typed clients, ``GET /teams``, the team metrics and envd's ``/files/compose`` and
``/metrics`` (the Python SDK generates no client for those). Contract: shared/e2b-protocol.md
§2.3 and §3.5; integration detail in tests/integration/test_e2b_surface.py.
"""

from __future__ import annotations

import pytest

from .clients import PreparedClient
from .expect import assert_sdk_version

pytestmark = [pytest.mark.compat, pytest.mark.one_runtime_per_client]

MIB = 1024 * 1024


def test_refresh_teams_and_envd_extras(
    client: PreparedClient, runtime_e2b_env: dict[str, str]
) -> None:
    result = client.run("surface", runtime_e2b_env)
    assert_sdk_version(result, client)
    assert result["kill"]["ok"] is True

    assert result["refresh_status"] == 204
    assert result["end_after"] >= result["end_before"] + 500, "refreshed for 600 s, not 60"
    if client.lang == "python":
        assert result["unknown_status"] == 404
        assert result["unknown_message"].startswith(f"sandbox '{'a' * 25}' not found")
        return

    assert result["teams_status"] == 200
    (team,) = result["teams"]
    assert team["isDefault"] is True
    assert team["apiKey"] == runtime_e2b_env["E2B_API_KEY"]
    assert team["teamID"] and team["name"]

    assert result["team_metrics_status"] == 200
    points = result["team_metrics"]
    assert points and max(p["concurrentSandboxes"] for p in points) >= 1
    assert any(p["sandboxStartRate"] > 0 for p in points), "the scenario's sandbox started"
    assert result["team_max_status"] == 200
    assert result["team_max"]["value"] == max(p["concurrentSandboxes"] for p in points)
    assert result["foreign_status"] == 403

    assert result["compose_status"] == 200
    assert result["compose"] == {"path": "/home/user/hw.txt", "name": "hw.txt", "type": "file"}
    assert result["composed"] == "hello world"
    assert result["part1_exists"] is False, "envd deletes composed sources"
    assert result["compose_missing_status"] == 404

    assert result["envd_metrics_status"] == 200
    metrics = result["envd_metrics"]
    assert metrics["cpu_count"] >= 1
    assert 0 <= metrics["cpu_used_pct"] <= 100
    assert metrics["mem_total"] == metrics["mem_total_mib"] * MIB
    assert 0 < metrics["mem_used"] < metrics["mem_total"]
    assert 0 <= metrics["disk_used"] < metrics["disk_total"]
