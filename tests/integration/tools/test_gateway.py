"""The tool gateway against real sandboxes: call styles, policy, approvals, limits, secrets,
MCP, audit, and the GW/SEC/AUTH cases of shared/security.md that apply."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.fixtures.server import RunningServer, exec_sandgate
from tests.framework.envd import CommandResult
from tests.framework.posture import started
from tests.integration.tools.conftest import CANARY, SLEEPER_PIDS

pytestmark = pytest.mark.docker

Make = Callable[[str], tuple[str, Callable[[str], CommandResult]]]


def audit_query(server: RunningServer, *args: str) -> list[dict[str, Any]]:
    out = server.cli("audit", "query", "--json", *args).stdout
    return [json.loads(line) for line in out.splitlines() if line.startswith("{")]


def wait_for(condition: Callable[[], Any], what: str, timeout: float = 30) -> Any:
    deadline = time.monotonic() + timeout
    while not (value := condition()):
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)
    return value


def test_shell_python_and_js_call_styles(tools_server: RunningServer, agent_sandbox: Make) -> None:
    sandbox_id, run = agent_sandbox("writer")
    assert run("""kv set style:1 '{"n": 1}'""").exit_code == 0
    shell = run("kv get style:1")
    assert shell.exit_code == 0, shell.stderr
    assert json.loads(shell.stdout) == {"n": 1}
    python = run('python3 -c \'import sandgate_tools as t; print(t.kv.get(key="style:1")["n"])\'')
    assert python.stdout.strip() == "1", python.stderr
    # The base image has no node; the generated module runs under the host's node against
    # this sandbox's own socket (identity is the socket, so it acts as this sandbox).
    node = shutil.which("node")
    assert node is not None
    host_dir = tools_server.home / "sandboxes" / sandbox_id
    script = (
        "const t = require('sandgate_tools');"
        "t.kv.get({key: 'style:1'}).then(v => console.log(JSON.stringify(v)));"
    )
    js = subprocess.run(
        [node, "-e", script],
        capture_output=True,
        text=True,
        timeout=30,
        env={
            "NODE_PATH": str(host_dir / "tools" / "js"),
            "SANDGATE_GATEWAY_SOCKET": str(host_dir / "gateway.sock"),
        },
    )
    assert js.returncode == 0, js.stderr
    assert json.loads(js.stdout) == {"n": 1}
    assert "get(args?: KvArgs" in (host_dir / "tools" / "js" / "sandgate_tools.d.ts").read_text()
    rows = audit_query(tools_server, "--sandbox", sandbox_id)
    assert [r["action"] for r in rows if r["event"] == "tool.call"] == ["set", "get", "get", "get"]


def test_only_allowed_tools_appear_and_help_shows_schema(agent_sandbox: Make) -> None:
    _, run = agent_sandbox("data-analyst")
    listing = run("ls /run/sandgate/tools/bin; kv --help")
    assert listing.stdout.split("\n")[0] == "kv"
    assert "echo_secret" not in listing.stdout
    assert '"enum": [' in listing.stdout and "usage: kv {get|set|list|delete}" in listing.stdout
    python = run("python3 -c 'import sandgate_tools as t; print(hasattr(t, \"echo_secret\"))'")
    assert python.stdout.strip() == "False"


def test_policy_allows_reads_denies_writes_and_audits_both(
    tools_server: RunningServer, agent_sandbox: Make
) -> None:
    sandbox_id, run = agent_sandbox("data-analyst")
    read = run("kv get user:1")
    assert read.exit_code == 0
    write = run("kv set user:1 x")
    assert write.exit_code == 1
    assert "policy_denied" in write.stderr and "analyst-no-write" in write.stderr
    rows = audit_query(tools_server, "--sandbox", sandbox_id, "--tool", "kv")
    assert [(r["action"], r["outcome"], r["rule"]) for r in rows] == [
        ("get", "allowed", "analyst-read"),
        ("set", "denied", "analyst-no-write"),
    ]


def test_GW_01_unknown_tool_is_policy_denied(
    tools_server: RunningServer, agent_sandbox: Make
) -> None:
    sandbox_id, run = agent_sandbox("data-analyst")
    result = run(
        "python3 -c 'from sandgate_tools import call, ToolError\n"
        'for n in ["echo_secret", "nope", "../kv", "kv\\u200b"]:\n'
        "    try: call(n, {})\n"
        "    except ToolError as e: print(e.code)'"
    )
    assert result.stdout.split() == ["policy_denied"] * 4
    rows = audit_query(tools_server, "--sandbox", sandbox_id, "--outcome", "denied")
    assert len(rows) == 4 and {r["rule"] for r in rows} == {"default-deny"}


def _run_in_thread(run: Callable[[str], CommandResult], command: str) -> dict[str, Any]:
    box: dict[str, Any] = {}
    thread = threading.Thread(target=lambda: box.update(result=run(command)))
    thread.start()
    box["thread"] = thread
    return box


def _pending(server: RunningServer, sandbox_id: str) -> list[dict[str, Any]]:
    out = server.cli("approvals", "list", "--json").stdout
    found = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
    return [a for a in found if a["sandbox_id"] == sandbox_id]


def test_approval_approve_via_cli(tools_server: RunningServer, agent_sandbox: Make) -> None:
    sandbox_id, run = agent_sandbox("approver-test")
    call = _run_in_thread(run, "kv set approved:1 yes && kv get approved:1")
    pending = wait_for(lambda: _pending(tools_server, sandbox_id), "a pending approval")
    assert pending[0]["tool"] == "kv" and pending[0]["action"] == "set"
    tools_server.cli("approvals", "approve", pending[0]["id"])
    call["thread"].join(60)
    assert call["result"].exit_code == 0 and "yes" in call["result"].stdout
    replay = tools_server.cli("approvals", "approve", pending[0]["id"], check=False)
    assert replay.returncode == 1 and "already approved" in replay.stderr  # GW-16


def test_approval_deny_via_api(tools_server: RunningServer, agent_sandbox: Make) -> None:
    sandbox_id, run = agent_sandbox("approver-test")
    call = _run_in_thread(run, "kv set denied:1 no")
    headers = {"X-API-Key": tools_server.api_key}

    def pending() -> list[dict[str, Any]]:
        body = httpx.get(
            f"{tools_server.url}/v1/approvals", params={"state": "pending"}, headers=headers
        ).json()
        return [a for a in body["approvals"] if a["sandbox_id"] == sandbox_id]

    approval = wait_for(pending, "a pending approval")[0]
    response = httpx.post(f"{tools_server.url}/v1/approvals/{approval['id']}/deny", headers=headers)
    assert response.status_code == 200 and response.json()["state"] == "denied"
    call["thread"].join(60)
    assert call["result"].exit_code == 1 and "approval_denied" in call["result"].stderr
    assert run("kv get denied:1").stdout.strip() == "null"


def test_approval_timeout_denies(tools_server: RunningServer, agent_sandbox: Make) -> None:
    _, run = agent_sandbox("approver-test")
    started = time.monotonic()
    result = run("kv set timeout:1 x")
    assert result.exit_code == 1 and "expired" in result.stderr
    assert time.monotonic() - started >= 4  # approvals.timeout_s


def test_GW_11_rate_limit_then_429(agent_sandbox: Make) -> None:
    _, run = agent_sandbox("limited")
    _, other = agent_sandbox("limited")
    result = run(
        "for i in 1 2 3 4; do kv get a >/dev/null 2>/tmp/err$i; echo $?; done; cat /tmp/err4"
    )
    assert result.stdout.split("\n")[:4] == ["0", "0", "0", "1"]
    assert "rate_limited" in result.stdout
    assert other("kv get a").exit_code == 0  # another sandbox is unaffected


def test_SEC_01_secret_never_reaches_sandbox_output_logs_or_audit(
    tools_server: RunningServer, agent_sandbox: Make
) -> None:
    _, run = agent_sandbox("writer")
    echoed = run("echo_secret hello")
    assert echoed.exit_code == 0, echoed.stderr + tools_server.log_text()[-4000:]
    reply = json.loads(echoed.stdout)
    assert reply == {"got": "hello", "secret": "[REDACTED:CANARY]"}
    search = run(
        "grep -rl CANARY- /run/sandgate /home /tmp /etc 2>/dev/null; "
        "cat /proc/*/environ 2>/dev/null | tr '\\0' '\\n' | grep -c CANARY-; env"
    )
    assert CANARY not in search.stdout
    assert CANARY not in tools_server.log_text()
    assert CANARY not in (tools_server.home / "audit" / "audit.jsonl").read_text()


def test_mcp_tools_over_stdio_and_http(tools_server: RunningServer, agent_sandbox: Make) -> None:
    _, run = agent_sandbox("writer")
    result = run(
        "python3 -c 'import sandgate_tools as t; "
        'print(t.mstdio_add(a=2, b=3)["result"], t.mhttp_shout(text="hi")["result"])\''
    )
    assert result.stdout.split() == ["5", "HI"], result.stderr
    listed = httpx.get(
        f"{tools_server.url}/v1/tools", headers={"X-API-Key": tools_server.api_key}
    ).json()["tools"]
    add = next(t for t in listed if t["name"] == "mstdio_add")
    assert add["parameters"]["required"] == ["a", "b"] and add["kind"] == "mcp"


def test_GW_04_arguments_are_argv_not_shell(agent_sandbox: Make) -> None:
    _, run = agent_sandbox("writer")
    marker = Path("/tmp/sandgate-gw04-pwn")
    marker.unlink(missing_ok=True)
    literal = run(f"echo_secret '$(touch {marker})'")
    assert json.loads(literal.stdout)["got"] == f"$(touch {marker})"
    option = run("echo_secret -- --output=/tmp/x")
    assert option.exit_code == 1 and "must not start with '-'" in option.stderr
    assert not marker.exists()


def test_timeout_kills_process_group_and_output_is_truncated(agent_sandbox: Make) -> None:
    _, run = agent_sandbox("writer")
    slow = run("sleeper")
    assert slow.exit_code == 1 and "tool_timeout" in slow.stderr
    # The tool's whole process group is gone: both of its processes (the pids it wrote down).
    pids = [int(pid) for pid in SLEEPER_PIDS.read_text().split()]
    assert len(pids) == 2
    assert [pid for pid in pids if started(pid) is not None] == []
    big = run("big | tail -c 60")  # GW-13
    assert "[sandgate: output truncated at 1024 bytes]" in big.stdout


def test_GW_10_and_GW_14_audit_invisible_and_socket_has_no_other_routes(
    agent_sandbox: Make,
) -> None:
    _, run = agent_sandbox("writer")
    look = run("ls -A /run/sandgate; find / -name 'audit.jsonl' -not -path '/proc/*' 2>/dev/null")
    assert look.stdout.split() == [
        "egress.sock",
        "envs.json",
        "gateway.sock",
        "guest.json",
        "guest.pyz",
        "guest.sock",
        "tools",
    ]
    probe = run(
        "python3 -c 'import socket; s = socket.socket(socket.AF_UNIX); "
        's.connect("/run/sandgate/gateway.sock"); '
        's.sendall(b"GET /admin HTTP/1.1\\r\\n\\r\\n"); print(s.recv(4096).decode())\''
    )
    assert json.loads(probe.stdout)["error"]["code"] == "invalid_json"  # not a JSON line


def test_AUTH_01_v1_routes_need_an_api_key(tools_server: RunningServer) -> None:
    routes = [
        ("GET", "/v1/tools"),
        ("GET", "/v1/policy"),
        ("POST", "/v1/policy/dry-run"),
        ("GET", "/v1/approvals"),
        ("POST", "/v1/approvals/apr_x/approve"),
        ("POST", "/v1/approvals/apr_x/deny"),
        ("GET", "/v1/audit"),
    ]
    for method, path in routes:
        for headers in (
            {},
            {"X-API-Key": "e2b_" + "0" * 40},
            {"X-API-Key": tools_server.api_key[:-1]},
        ):
            response = httpx.request(method, tools_server.url + path, headers=headers, json={})
            assert response.status_code == 401, (method, path, headers)
    headers = {"X-API-Key": tools_server.api_key}
    dry = httpx.post(
        f"{tools_server.url}/v1/policy/dry-run",
        headers=headers,
        json={
            "tool": "kv",
            "arguments": {"op": "set", "key": "k", "value": 1},
            "agent": "data-analyst",
        },
    )
    assert dry.json() == {
        "effect": "deny",
        "rule": "analyst-no-write",
        "reason": "policy rule 'analyst-no-write' says deny",
    }


def test_audit_verify_and_tampering(tools_server: RunningServer, tmp_path: Path) -> None:
    ok = tools_server.cli("audit", "verify")
    assert ok.returncode == 0 and "records checked" in ok.stdout
    home = tmp_path / "home"
    home.mkdir()
    shutil.copytree(tools_server.home / "audit", home / "audit")
    for name in os.listdir(tools_server.home):
        if name.startswith("sandgate.db"):
            shutil.copy(tools_server.home / name, home / name)
    lines = (home / "audit" / "audit.jsonl").read_text().splitlines()
    record = json.loads(lines[1])
    record["outcome"] = "allowed" if record["outcome"] != "allowed" else "denied"
    lines[1] = json.dumps(record)
    (home / "audit" / "audit.jsonl").write_text("\n".join(lines) + "\n")
    env = {**tools_server.server_env, "SANDGATE_HOME": str(home)}
    bad = exec_sandgate(["audit", "verify"], env, timeout=60)
    assert bad.returncode == 1 and "record 2" in bad.stderr
