"""Metrics and logs (issue 13) through each pinned official SDK, on docker and on bwrap.

``get_metrics``/``getMetrics`` (instance and static, with a window), ``GET /sandboxes/metrics``
and the logs endpoints (v1, which ``e2b sandbox logs`` reads, and v2), whose answers the SDKs'
generated models parse. The E2B CLI's ``sandbox metrics`` and ``sandbox logs`` are in
``test_cli.py``. Contract: shared/e2b-protocol.md §2.3.
"""

from __future__ import annotations

import json
import secrets

import pytest

from .clients import PreparedClient
from .expect import assert_sdk_version, failed_with

pytestmark = [pytest.mark.compat, pytest.mark.one_runtime_per_client]

MIB = 1024 * 1024
#: The SDK test suite allows this much clock slack around a metrics window.
SLACK_S = 10.0


def test_metrics_and_logs(client: PreparedClient, runtime_e2b_env: dict[str, str]) -> None:
    marker = "tm" + secrets.token_hex(6)
    result = client.run("telemetry", runtime_e2b_env, [marker])
    assert_sdk_version(result, client)
    sandbox_id = result["sandbox_id"]
    assert result["echo"] == f"{marker}-out\n"

    metrics = result["metrics"]
    assert metrics, "a running sandbox's metrics are never empty"
    for metric in metrics:
        assert metric["cpu_count"] == 1
        assert 0.0 <= metric["cpu_used_pct"] <= 100.0
        assert metric["mem_total"] == 512 * MIB
        assert 0 < metric["mem_used"] < metric["mem_total"]
        assert metric["mem_cache"] >= 0
        assert metric["disk_total"] == 2048 * MIB
        assert 0 <= metric["disk_used"] < metric["disk_total"]
    start, end = result["window"]
    assert result["metrics_window"]
    for metric in result["metrics_window"]:
        assert start - SLACK_S <= metric["timestamp"] <= end + SLACK_S
    assert result["metrics_past"] == []
    assert result["metrics_many_status"] == 200
    assert result["metrics_many_ids"] == [sandbox_id]

    v1 = result["logs_v1"]
    assert v1["status"] == 200
    assert len(v1["lines"]) == len(v1["entries"])
    entries = v1["entries"]
    kinds = [entry["fields"].get("event_type") for entry in entries]
    assert kinds[0] == "sandbox_created"
    output = {
        (entry["fields"].get("stream"), entry["message"])
        for entry in entries
        if entry["fields"].get("event_type") == "process_output"
    }
    assert {("stdout", f"{marker}-out"), ("stderr", f"{marker}-err")} <= output
    assert ("stdout", f"{marker}-bg") in output, "output of a disconnected background command"
    assert all(entry["level"] in ("debug", "info", "warn", "error") for entry in entries)
    for line in v1["lines"]:
        record = json.loads(line["line"])
        assert record["sandboxID"] == sandbox_id and record["level"] in ("info", "warn")
    stamps = [entry["timestamp"] for entry in entries]
    assert stamps == sorted(stamps)

    assert result["logs_v2_status"] == 200
    newest = [entry["message"] for entry in result["logs_v2"]]
    assert len(newest) == 2 and newest[0] == f"{marker}-bg", newest
    assert newest[1] in (f"{marker}-out", f"{marker}-err")

    assert result["kill"] is True
    assert result["logs_after_kill"]["fields"]["event_type"] == "sandbox_killed"
    after = result["metrics_after_kill"]
    assert after["ok"] and after["value"] >= 1, "an ended sandbox keeps its samples"
    failed_with(client, result["metrics_unknown"], "NotFound")
