"""The E2B CLI (``@e2b/cli``, pinned in ``clients/js/e2b-cli-<version>``) against Sandgate:
``e2b sandbox metrics`` and ``e2b sandbox logs``, once and with ``--follow``, on docker and on
bwrap. Only ``E2B_*`` variables point it at the server; ``HOME`` is empty (no login).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.fixtures.server import RunningServer
from tests.framework.envd import create, run
from tests.framework.sandbox_http import wait_for

from .clients import CLI, PreparedClient, prepare

pytestmark = pytest.mark.compat

CLI_TIMEOUT_S = 120
MIB = 1024 * 1024


@pytest.fixture(scope="session")
def e2b_cli() -> PreparedClient:
    return prepare(CLI)


@pytest.fixture
def cli_env(runtime_e2b_env: dict[str, str], tmp_path: Path) -> dict[str, str]:
    home = tmp_path / "home"
    home.mkdir()
    return {**runtime_e2b_env, "HOME": str(home)}


@pytest.fixture
def sandbox(runtime_server: RunningServer) -> Iterator[dict[str, Any]]:
    created = create(runtime_server.url, runtime_server.api_key, timeout=300)
    yield created
    httpx.delete(
        f"{runtime_server.url}/sandboxes/{created['sandboxID']}",
        headers={"X-API-Key": runtime_server.api_key},
    )


def _e2b(cli: PreparedClient, env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    argv, full_env = cli.cli(args, env)
    return subprocess.run(
        argv, env=full_env, capture_output=True, text=True, timeout=CLI_TIMEOUT_S, check=False
    )


class Following:
    """A ``--follow`` CLI process whose stdout is read line by line as it comes."""

    def __init__(self, cli: PreparedClient, env: dict[str, str], *args: str) -> None:
        argv, full_env = cli.cli(args, env)
        self.process = subprocess.Popen(
            argv, env=full_env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )
        self.lines: list[str] = []
        assert self.process.stdout is not None
        stdout = self.process.stdout
        self._reader = threading.Thread(target=lambda: self.lines.extend(stdout), daemon=True)
        self._reader.start()

    def text(self) -> str:
        return "".join(self.lines)

    def wait(self, timeout: float) -> int:
        code = self.process.wait(timeout)
        self._reader.join(timeout)
        return code

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
        self.process.wait()


def test_cli_sandbox_metrics(
    e2b_cli: PreparedClient,
    cli_env: dict[str, str],
    runtime_server: RunningServer,
    sandbox: dict[str, Any],
) -> None:
    sandbox_id = sandbox["sandboxID"]
    pretty = _e2b(e2b_cli, cli_env, "sandbox", "metrics", sandbox_id)
    assert pretty.returncode == 0, pretty.stderr
    assert f"Metrics for sandbox {sandbox_id}" in pretty.stdout
    rows = [line for line in pretty.stdout.splitlines() if "CPU" in line]
    assert rows, pretty.stdout
    assert re.search(r"CPU:\s+[0-9.]+% /\s+1 Core", rows[0]), rows[0]
    assert re.search(r"Memory:\s+\d+ / 512\s+MiB \| Disk:\s+\d+ / 2048\s+MiB", rows[0]), rows[0]
    as_json = _e2b(e2b_cli, cli_env, "sandbox", "metrics", sandbox_id, "--format", "json")
    assert as_json.returncode == 0, as_json.stderr
    samples = [json.loads(line) for line in as_json.stdout.splitlines() if line.startswith("{")]
    assert samples
    assert samples[-1]["cpuCount"] == 1 and samples[-1]["memTotal"] == 512 * MIB
    assert samples[-1]["diskTotal"] == 2048 * MIB
    # --follow keeps printing new samples as the sampler takes them.
    following = Following(e2b_cli, cli_env, "sandbox", "metrics", sandbox_id, "-f")
    try:
        wait_for(
            lambda: sum("CPU" in line for line in following.lines) >= 2,
            60,
            "a second sample printed by `e2b sandbox metrics --follow`",
        )
    finally:
        following.stop()
    missing = _e2b(e2b_cli, cli_env, "sandbox", "metrics", "a" * 25)
    assert missing.returncode == 1 and "not found" in missing.stderr.lower()


def test_cli_sandbox_logs(
    e2b_cli: PreparedClient,
    cli_env: dict[str, str],
    runtime_server: RunningServer,
    sandbox: dict[str, Any],
) -> None:
    sandbox_id = sandbox["sandboxID"]
    marker = f"cli{time.time_ns()}"
    run(runtime_server.url, sandbox_id, sandbox["envdAccessToken"], f"echo {marker}")
    pretty = _e2b(e2b_cli, cli_env, "sandbox", "logs", sandbox_id)
    assert pretty.returncode == 0, pretty.stderr
    assert f"Logs for sandbox {sandbox_id}" in pretty.stdout
    assert marker in pretty.stdout and "Sandbox created" in pretty.stdout
    as_json = _e2b(e2b_cli, cli_env, "sandbox", "logs", sandbox_id, "--format", "json")
    assert as_json.returncode == 0, as_json.stderr
    records = [json.loads(line) for line in as_json.stdout.splitlines() if line.startswith("{")]
    mine = [r for r in records if r.get("message") == marker]
    assert len(mine) == 1
    assert mine[0]["level"].strip().upper() == "INFO"
    assert mine[0]["logger"] == "process" and mine[0]["stream"] == "stdout"
    only_warnings = _e2b(e2b_cli, cli_env, "sandbox", "logs", sandbox_id, "--level", "WARN")
    assert only_warnings.returncode == 0 and marker not in only_warnings.stdout
    by_logger = _e2b(
        e2b_cli, cli_env, "sandbox", "logs", sandbox_id, "--loggers", "sandbox", "--format", "json"
    )
    loggers = {json.loads(line)["logger"] for line in by_logger.stdout.splitlines() if line}
    assert loggers == {"sandbox"}


def test_cli_sandbox_logs_follow(
    e2b_cli: PreparedClient,
    cli_env: dict[str, str],
    runtime_server: RunningServer,
) -> None:
    created = create(runtime_server.url, runtime_server.api_key, timeout=300)
    sandbox_id, token = created["sandboxID"], created["envdAccessToken"]
    following = Following(e2b_cli, cli_env, "sandbox", "logs", sandbox_id, "--follow")
    try:
        for step in ("first", "second"):
            marker = f"{step}{time.time_ns()}"
            run(runtime_server.url, sandbox_id, token, f"echo {marker}")
            wait_for(lambda m=marker: m in following.text(), 60, f"{step} line followed")
        killed = httpx.delete(
            f"{runtime_server.url}/sandboxes/{sandbox_id}",
            headers={"X-API-Key": runtime_server.api_key},
        )
        assert killed.status_code == 204
        assert following.wait(60) == 0, following.process.stderr
        assert "Stopped printing logs — sandbox is closed" in following.text()
        # The kill's own line: the CLI fetches logs, then asks whether the sandbox still
        # runs, and stops at the first "no", so a kill landing between the two ends the
        # follow before its line is fetched (against E2B's cloud alike). The line is there
        # for any reader once the kill has answered.
        after = _e2b(e2b_cli, cli_env, "sandbox", "logs", sandbox_id)
        assert after.returncode == 0, after.stderr
        assert "Sandbox killed" in after.stdout
    finally:
        following.stop()


def test_cli_is_the_pinned_release(e2b_cli: PreparedClient) -> None:
    version = subprocess.run(
        [str(e2b_cli.node_modules / ".bin" / "e2b"), "--version"],
        capture_output=True,
        text=True,
        timeout=CLI_TIMEOUT_S,
        check=True,
        env={"PATH": os.environ["PATH"], "NO_UPDATE_NOTIFIER": "1"},
    )
    assert version.stdout.strip() == CLI.name.rsplit("-", 1)[1]
