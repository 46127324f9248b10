"""Issue 14, "the gateway's promises hold under pressure": one regression test per point, on a
real server with real sandboxes, on each runtime."""

from __future__ import annotations

import json
from collections.abc import Callable

import httpx

from tests.fixtures.server import RunningServer
from tests.integration.promises.conftest import (
    audit_rows,
    sandbox_as,
)

AUDIT_ONLY = """
agents: [{id: worker}]
tools: [{name: kv, kind: builtin}]
policy:
  rules: [{id: worker-kv, effect: allow, subject: {agent: worker}, tool: kv}]
"""


def test_point_1_the_audit_log_cannot_be_rolled_back_quietly(
    runtime_server_factory: Callable[..., RunningServer],
) -> None:
    server = runtime_server_factory(config=AUDIT_ONLY)
    box = sandbox_as(server, "worker")
    try:
        assert box.sh("kv set before 1").exit_code == 0
        log_path = server.home / "audit" / "audit.jsonl"
        lines = log_path.read_text().splitlines()
        last = json.loads(lines[-1])["seq"]
        # The intruder deletes the last record; the next record anyone writes must not paper
        # over the gap (it used to crash on the index, and verify then said "intact").
        log_path.write_text("".join(line + "\n" for line in lines[:-1]))

        refused = box.sh("kv set after 2")
        assert refused.exit_code == 1
        assert "audit_tampered" in refused.stderr and f"first bad record: {last}" in refused.stderr

        health = httpx.get(f"{server.url}/health").json()
        assert health["status"] == "ok"
        assert health["audit"]["state"] == "tampered"
        assert health["audit"]["first_bad_record"] == last

        verify = server.cli("audit", "verify", check=False)
        assert verify.returncode == 1
        assert f"first bad record: {last}" in verify.stderr
        doctor = server.cli("doctor", check=False)
        assert "audit log" in doctor.stdout and "tampered" in doctor.stdout
        assert "IntegrityError" not in server.log_text()

        recovered = server.cli("audit", "recover", "--yes")
        assert "new audit log started" in recovered.stdout
        assert box.sh("kv get after").stdout.strip() == "null"  # the refused call never ran
        assert box.sh("kv set after 3").exit_code == 0
        assert server.cli("audit", "verify").returncode == 0
        assert httpx.get(f"{server.url}/health").json()["audit"] == {"state": "ok"}
        refusals = [r for r in audit_rows(server) if r["event"] == "audit.recovered"]
        assert len(refusals) == 1
    finally:
        box.kill()
