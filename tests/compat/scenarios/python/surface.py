"""Refreshes (issue 13): the SDK's generated ``post_sandboxes_sandbox_id_refreshes`` with its
``SandboxRefreshRequest`` model (the SDK has no method for it), read back through
``get_info``. The Python SDK has no teams or team-metrics client; the JS scenario covers them.
"""

from __future__ import annotations

from typing import Any

from _common import attempt, run
from e2b import Sandbox
from e2b.api import ApiClient
from e2b.api.client.api.sandboxes import post_sandboxes_sandbox_id_refreshes

try:  # the model's name since the spec named it (2.63)
    from e2b.api.client.models import SandboxRefreshRequest as RefreshBody
except ImportError:  # 2.31: the generator's name for an inline body
    from e2b.api.client.models import PostSandboxesSandboxIDRefreshesBody as RefreshBody
from e2b.connection_config import ConnectionConfig


def scenario(args: list[str]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    api = ApiClient(ConnectionConfig())
    sbx = Sandbox.create("base", timeout=60)
    try:
        out["end_before"] = sbx.get_info().end_at.timestamp()
        refreshed = post_sandboxes_sandbox_id_refreshes.sync_detailed(
            sbx.sandbox_id, client=api, body=RefreshBody(duration=600)
        )
        out["refresh_status"] = int(refreshed.status_code)
        out["end_after"] = sbx.get_info().end_at.timestamp()
        unknown = post_sandboxes_sandbox_id_refreshes.sync_detailed(
            "a" * 25, client=api, body=RefreshBody(duration=60)
        )
        out["unknown_status"] = int(unknown.status_code)
        out["unknown_message"] = getattr(unknown.parsed, "message", None)
    finally:
        out["kill"] = attempt(sbx.kill)
    return out


if __name__ == "__main__":
    run(scenario)
