"""Metrics and logs (issue 13): ``get_metrics`` as instance and class method (with a
``start``/``end`` window), ``GET /sandboxes/metrics`` and both logs endpoints through the SDK's
own generated API client and models (the logs have no SDK method; the CLI reads v1).

Argument: a marker the scenario prints inside the sandbox.
"""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta
from typing import Any

from _common import attempt, run
from e2b import Sandbox
from e2b.api import ApiClient
from e2b.api.client.api.sandboxes import (
    get_sandboxes_metrics,
    get_sandboxes_sandbox_id_logs,
    get_v_2_sandboxes_sandbox_id_logs,
)
from e2b.api.client.models import LogsDirection
from e2b.connection_config import ConnectionConfig

POLL_S = 30.0


def metric_dict(metric: Any) -> dict[str, Any]:
    return {
        "timestamp": metric.timestamp.timestamp(),
        "cpu_count": metric.cpu_count,
        "cpu_used_pct": metric.cpu_used_pct,
        "mem_used": metric.mem_used,
        "mem_total": metric.mem_total,
        "mem_cache": metric.mem_cache,
        "disk_used": metric.disk_used,
        "disk_total": metric.disk_total,
    }


def entry_dict(entry: Any) -> dict[str, Any]:
    return {
        "timestamp": entry.timestamp.timestamp(),
        "level": entry.level.value,
        "message": entry.message,
        "fields": dict(entry.fields.additional_properties),
    }


def logs_v1(api: ApiClient, sandbox_id: str) -> dict[str, Any]:
    response = get_sandboxes_sandbox_id_logs.sync_detailed(sandbox_id, client=api)
    parsed = response.parsed
    return {
        "status": int(response.status_code),
        "lines": [
            {"timestamp": log.timestamp.timestamp(), "line": log.line} for log in parsed.logs
        ],
        "entries": [entry_dict(entry) for entry in parsed.log_entries],
    }


def scenario(args: list[str]) -> dict[str, Any]:
    marker = args[0]
    out: dict[str, Any] = {}
    api = ApiClient(ConnectionConfig())
    sbx = Sandbox.create("base")
    sandbox_id = sbx.sandbox_id
    out["sandbox_id"] = sandbox_id
    try:
        out["echo"] = sbx.commands.run(f"echo {marker}-out; echo {marker}-err >&2").stdout
        out["metrics"] = [metric_dict(m) for m in sbx.get_metrics()]
        start = datetime.now(UTC) - timedelta(seconds=60)
        end = datetime.now(UTC) + timedelta(seconds=60)
        out["window"] = [start.timestamp(), end.timestamp()]
        window = Sandbox.get_metrics(sandbox_id, start=start, end=end)
        out["metrics_window"] = [metric_dict(m) for m in window]
        past = Sandbox.get_metrics(
            sandbox_id, start=start - timedelta(hours=2), end=start - timedelta(hours=1)
        )
        out["metrics_past"] = [metric_dict(m) for m in past]
        many = get_sandboxes_metrics.sync_detailed(client=api, sandbox_ids=[sandbox_id])
        out["metrics_many_status"] = int(many.status_code)
        out["metrics_many_ids"] = sorted(many.parsed.sandboxes)

        handle = sbx.commands.run(f"sleep 0.5; echo {marker}-bg", background=True)
        handle.disconnect()  # nobody streams it any more; its output still reaches the log
        deadline = time.monotonic() + POLL_S
        v1 = logs_v1(api, sandbox_id)
        while f"{marker}-bg" not in [e["message"] for e in v1["entries"]]:
            if time.monotonic() > deadline:
                break
            time.sleep(0.2)
            v1 = logs_v1(api, sandbox_id)
        out["logs_v1"] = v1
        v2 = get_v_2_sandboxes_sandbox_id_logs.sync_detailed(
            sandbox_id, client=api, search=marker, direction=LogsDirection.BACKWARD, limit=2
        )
        out["logs_v2_status"] = int(v2.status_code)
        out["logs_v2"] = [entry_dict(entry) for entry in v2.parsed.logs]

        out["kill"] = sbx.kill()
        out["logs_after_kill"] = logs_v1(api, sandbox_id)["entries"][-1]
        out["metrics_after_kill"] = attempt(lambda: len(Sandbox.get_metrics(sandbox_id)))
        missing = Sandbox.get_metrics
        out["metrics_unknown"] = attempt(lambda: missing("a" * 25))
    finally:
        out["cleanup"] = attempt(lambda: Sandbox.kill(sandbox_id))
    return out


if __name__ == "__main__":
    run(scenario)
