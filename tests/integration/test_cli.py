"""The sandgate command line, run as a user would (subprocesses, real store, real Docker)."""

from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path

import pytest

from tests.fixtures.server import (
    FLOOR_EXCEPTIONS_ENV,
    TEST_FLOOR_EXCEPTIONS,
    RunningServer,
    exec_sandgate,
)
from tests.framework.envd import create


def sandgate(home: Path, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("E2B_", "SANDGATE_"))}
    env["SANDGATE_HOME"] = str(home)
    env["COLUMNS"] = "200"
    # As the test servers: commands that pick a runtime (`sandbox kill`) must pick Docker here.
    env[FLOOR_EXCEPTIONS_ENV] = json.dumps(TEST_FLOOR_EXCEPTIONS)
    proc = exec_sandgate(args, env)
    if check and proc.returncode != 0:
        raise AssertionError(f"sandgate {' '.join(args)} failed:\n{proc.stdout}\n{proc.stderr}")
    return proc


def test_env_prints_exports_and_reuses_its_key(tmp_path: Path) -> None:
    first = sandgate(tmp_path, "env").stdout
    second = sandgate(tmp_path, "env").stdout
    assert first == second
    exports = dict(re.findall(r"^export (E2B_[A-Z_]+)=(.*)$", first, re.M))
    assert set(exports) == {
        "E2B_API_KEY",
        "E2B_API_URL",
        "E2B_SANDBOX_URL",
        "E2B_VOLUME_API_URL",
        "E2B_DOMAIN",
    }
    assert re.fullmatch(r"e2b_[0-9a-f]{40}", exports["E2B_API_KEY"])
    assert exports["E2B_API_URL"] == "http://127.0.0.1:7788" == exports["E2B_SANDBOX_URL"]
    assert exports["E2B_VOLUME_API_URL"] == exports["E2B_API_URL"]
    assert oct((tmp_path / "default-api-key").stat().st_mode & 0o777) == "0o600"


def test_env_replaces_a_revoked_default_key(tmp_path: Path) -> None:
    key = re.search(r"E2B_API_KEY=(\S+)", sandgate(tmp_path, "env").stdout).group(1)  # type: ignore[union-attr]
    listed = [
        json.loads(line)
        for line in sandgate(tmp_path, "keys", "list", "--json").stdout.splitlines()
    ]
    sandgate(tmp_path, "keys", "revoke", listed[0]["id"])
    new = re.search(r"E2B_API_KEY=(\S+)", sandgate(tmp_path, "env").stdout).group(1)  # type: ignore[union-attr]
    assert new != key


def test_keys_create_list_revoke(tmp_path: Path) -> None:
    created = json.loads(
        sandgate(tmp_path, "keys", "create", "--team", "acme", "--name", "ci", "--json").stdout
    )
    assert re.fullmatch(r"e2b_[0-9a-f]{40}", created["key"])
    listed = [
        json.loads(x) for x in sandgate(tmp_path, "keys", "list", "--json").stdout.splitlines()
    ]
    assert [(k["id"], k["name"], k["revoked"]) for k in listed] == [(created["id"], "ci", False)]
    assert created["key"] not in sandgate(tmp_path, "keys", "list").stdout
    sandgate(tmp_path, "keys", "revoke", created["id"])
    listed = [
        json.loads(x) for x in sandgate(tmp_path, "keys", "list", "--json").stdout.splitlines()
    ]
    assert listed[0]["revoked"] is True
    missing = sandgate(tmp_path, "keys", "revoke", "key_nope", check=False)
    assert missing.returncode == 1 and "no key with id key_nope" in missing.stdout


def test_bad_config_is_rejected_with_the_key_path(tmp_path: Path) -> None:
    config = tmp_path / "bad.yaml"
    config.write_text("limits:\n  max_sandboxes_per_tem: 3\n")
    proc = sandgate(tmp_path, "keys", "list", "--config", str(config), check=False)
    assert proc.returncode == 1
    assert "limits.max_sandboxes_per_tem" in proc.stderr
    assert "Traceback" not in proc.stderr


@pytest.mark.docker
def test_sandbox_list_exec_kill(sandgate_server: RunningServer) -> None:
    created = create(sandgate_server.url, sandgate_server.api_key, metadata={"who": "cli"})
    sandbox_id = created["sandboxID"]
    rows = [
        json.loads(x)
        for x in sandgate(sandgate_server.home, "sandbox", "list", "--json").stdout.splitlines()
    ]
    assert sandbox_id in [r["id"] for r in rows]
    ran = sandgate(
        sandgate_server.home,
        "sandbox",
        "exec",
        sandbox_id,
        "--",
        "sh",
        "-c",
        "echo out; echo err >&2; exit 3",
        check=False,
    )
    assert (ran.returncode, ran.stdout, ran.stderr) == (3, "out\n", "err\n")
    sandgate(sandgate_server.home, "sandbox", "kill", sandbox_id)
    again = sandgate(sandgate_server.home, "sandbox", "kill", sandbox_id, check=False)
    assert again.returncode == 1 and "no live sandbox" in again.stderr
    # The kill is audited as the server's own would be (the command builds no HTTP app, but
    # the lifecycle it runs is the server's, audit log included).
    records = [
        json.loads(line)
        for line in (sandgate_server.home / "audit" / "audit.jsonl").read_text().splitlines()
    ]
    killed = [
        r for r in records if r.get("event") == "sandbox.killed" and r.get("sandbox") == sandbox_id
    ]
    assert [r["detail"]["reason"] for r in killed] == ["killed by operator"]


@pytest.mark.docker
def test_doctor_reports_each_check(tmp_path: Path) -> None:
    proc = sandgate(tmp_path, "doctor", check=False)
    for check in ("docker engine", "runc", "cgroup version", "seccomp", "disk", "template base"):
        assert check in proc.stdout
    assert proc.returncode in (0, 1)
    assert "Traceback" not in proc.stderr
