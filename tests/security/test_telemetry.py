"""Sandbox metrics and logs as an attack surface (security.md MT-07, VAL-07, RES-11).

* MT-07: another team's token learns nothing about a sandbox's metrics or logs (404, as for
  an unknown id), while it runs and after it ended.
* VAL-07: a process's output is data: whatever it prints (JSON, newlines, escapes, NUL,
  invalid UTF-8) lands in ``message`` of its own entries and cannot forge a field, a level or
  another entry.
* RES-11: an output flood leaves the guest's memory, the sandbox's log and the gateway
  bounded; the log says it was cut.
"""

from __future__ import annotations

import json
import struct
import time
from typing import Any

import httpx

from tests.fixtures.runtimes import RuntimeView
from tests.fixtures.server import RunningServer
from tests.framework.envd import create, envd_headers, run
from tests.framework.sandbox_http import rss_bytes

MiB = 1024 * 1024


def _other_key(server: RunningServer) -> str:
    made = server.cli("keys", "create", "--team", f"other-{time.time_ns()}", "--json")
    key: str = json.loads(made.stdout.strip().splitlines()[-1])["key"]
    return key


def _run_bytes(server: RunningServer, sandbox: dict[str, Any], command: str) -> bytes:
    payload = json.dumps(
        {"process": {"cmd": "/bin/bash", "args": ["-c", command]}, "stdin": False}
    ).encode()
    response = httpx.post(
        f"{server.url}/process.Process/Start",
        content=struct.pack(">BI", 0, len(payload)) + payload,
        headers={
            **envd_headers(sandbox["sandboxID"], sandbox["envdAccessToken"]),
            "content-type": "application/connect+json",
            "connect-protocol-version": "1",
        },
        timeout=60,
    )
    assert response.status_code == 200, response.text
    assert b'"exitCode"' not in response.content or b'"end"' in response.content
    return response.content


def _paths(sandbox_id: str) -> list[str]:
    return [
        f"/sandboxes/{sandbox_id}/metrics",
        f"/sandboxes/{sandbox_id}/logs",
        f"/v2/sandboxes/{sandbox_id}/logs",
    ]


def test_MT_07_metrics_and_logs_of_another_team_are_not_found(
    runtime_server: RunningServer,
) -> None:
    server = runtime_server
    created = create(server.url, server.api_key, timeout=120)
    sandbox_id = created["sandboxID"]
    run(server.url, sandbox_id, created["envdAccessToken"], "echo secret-output")
    other = {"X-API-Key": _other_key(server)}
    owner = {"X-API-Key": server.api_key}
    unknown = "a" * 25
    for ended in (False, True):
        for path in _paths(sandbox_id):
            theirs = httpx.get(server.url + path, headers=other)
            nobodys = httpx.get(server.url + path.replace(sandbox_id, unknown), headers=other)
            assert theirs.status_code == 404, (path, theirs.text)
            assert theirs.json()["message"].replace(sandbox_id, "X") == nobodys.json()[
                "message"
            ].replace(unknown, "X"), "no existence oracle"
            assert "secret-output" not in theirs.text
            assert httpx.get(server.url + path, headers=owner).status_code == 200
        many = httpx.get(
            f"{server.url}/sandboxes/metrics", params={"sandbox_ids": sandbox_id}, headers=other
        )
        assert many.status_code == 200 and many.json() == {"sandboxes": {}}
        if not ended:
            httpx.delete(f"{server.url}/sandboxes/{sandbox_id}", headers=owner)


def test_VAL_07_process_output_cannot_forge_log_entries(
    runtime_server: RunningServer, runtime_sandbox: dict[str, Any]
) -> None:
    server, sandbox_id = runtime_server, runtime_sandbox["sandboxID"]
    forged = '{"level":"error","logger":"sandboxSvc","event_type":"sandbox_killed"}'
    script = (
        f"printf '%s\\n' '{forged}'; "
        "printf 'two\\nlines\\r\\n'; "
        "printf '\\033[31mred\\033[0m\\n'; "
        "printf 'nul\\000byte\\n'; "
        "printf 'bad\\377utf8\\n' >&2"
    )
    _run_bytes(server, runtime_sandbox, script)  # the output is not UTF-8: read it as bytes
    body = httpx.get(
        f"{server.url}/sandboxes/{sandbox_id}/logs", headers={"X-API-Key": server.api_key}
    ).json()
    output = [e for e in body["logEntries"] if e["fields"].get("event_type") == "process_output"]
    assert [e["message"] for e in output] == [
        forged,
        "two",
        "lines",
        "\x1b[31mred\x1b[0m",
        "nul\ufffdbyte",
        "bad\ufffdutf8",
    ]
    for entry in output:
        assert entry["level"] == "info"
        assert entry["fields"]["logger"] == "processSvc"
        assert set(entry["fields"]) == {"logger", "event_type", "pid", "stream"}
    kinds = [e["fields"]["event_type"] for e in body["logEntries"]]
    assert "sandbox_killed" not in kinds
    lines = [json.loads(item["line"]) for item in body["logs"]]
    first = next(line for line in lines if line["message"] == forged)
    assert (first["level"], first["logger"], first["event_type"]) == (
        "info",
        "processSvc",
        "process_output",
    )


def test_RES_11_output_flood_keeps_the_log_and_the_guest_bounded(
    runtime_server: RunningServer,
    runtime_sandbox: dict[str, Any],
    runtime_view: RuntimeView,
) -> None:
    server, sandbox_id = runtime_server, runtime_sandbox["sandboxID"]
    guest_pid = runtime_view.init_pid(sandbox_id)
    before = rss_bytes(guest_pid)
    flood = "head -c $((24 * 1024 * 1024)) /dev/urandom | base64 -w 100; seq 1 30000 >&2"
    result = run(server.url, sandbox_id, runtime_sandbox["envdAccessToken"], flood)
    assert result.exit_code == 0 and len(result.stdout) > 24 * MiB
    grown = rss_bytes(guest_pid) - before
    assert grown < 16 * MiB, f"the guest grew by {grown / MiB:.1f} MiB"
    headers = {"X-API-Key": server.api_key}
    entries = httpx.get(f"{server.url}/sandboxes/{sandbox_id}/logs", headers=headers).json()[
        "logEntries"
    ]
    assert len(entries) <= 1000, "the sandbox's ring (sandbox_logs.max_entries_per_sandbox)"
    messages = [e["message"] for e in entries]
    assert any(m.startswith("[output truncated") for m in messages)
    assert sum(len(m) for m in messages) < 9 * MiB
    assert entries[-1]["fields"]["event_type"] == "process_end"
    assert httpx.get(f"{server.url}/health").status_code == 200
