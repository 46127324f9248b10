"""A sandbox limit the host cannot give is refused with what to do, on every runtime, and the
refused create leaves nothing behind."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import httpx

from sandgate.sandboxes.publish import STAGING
from tests.fixtures.server import RunningServer


def test_a_nofile_limit_above_the_kernels_ceiling_is_refused_with_what_to_do(
    runtime: str, runtime_server_factory: Callable[..., RunningServer]
) -> None:
    # Above fs.nr_open no process may have it, root with every capability included.
    too_many = int(Path("/proc/sys/fs/nr_open").read_text()) + 1
    server = runtime_server_factory(extra_env={"SANDGATE_LIMITS__NOFILE": str(too_many)})
    response = httpx.post(
        f"{server.url}/v2/sandboxes",
        json={"templateID": "base"},
        headers={"X-API-Key": server.api_key},
        timeout=120,
    )
    assert response.status_code == 503, response.text
    body = response.json()
    assert body["error_code"] == "runtime_unavailable"
    if runtime == "bwrap":
        assert f"limits.nofile is {too_many}" in body["message"]
        assert "fs.nr_open" in body["message"]
    else:
        # What the engine reports is the shim's refusal, not "unable to retrieve OCI error".
        assert f"cannot set the sandbox's RLIMIT_NOFILE to {too_many}" in body["message"]
        assert "limits.nofile" in body["message"]
    listed = httpx.get(f"{server.url}/sandboxes", headers={"X-API-Key": server.api_key}, timeout=30)
    assert listed.status_code == 200 and listed.json() == []
    assert not [p for p in (server.home / "sandboxes").glob("*") if p.name != STAGING]
