"""Foreground ``commands.run`` through each pinned official SDK (issue #2).

Contract: shared/e2b-protocol.md §3.3 (process.Process/Start, env layering, users, deadlines).
"""

from __future__ import annotations

import pytest

from .clients import PreparedClient
from .expect import assert_sdk_version, command_ok, failed_with

pytestmark = pytest.mark.compat


def test_commands_basic(client: PreparedClient, runtime_e2b_env: dict[str, str]) -> None:
    result = client.run("commands_basic", runtime_e2b_env)
    assert_sdk_version(result, client)

    command_ok(result["true"], "")
    command_ok(result["stderr"], "out\n", "err\n")
    command_ok(result["cwd"], "/tmp\n")
    command_ok(result["default_cwd"], "/home/user\n")

    command_ok(result["env_override"], "command\n")
    command_ok(result["env_sandbox"], "sandbox\n")
    command_ok(result["env_command_only"], "once\n")
    command_ok(result["env_not_kept"], "unset\n")

    command_ok(result["root_uid"], "0\n")
    command_ok(result["root_whoami"], "root\n")
    command_ok(result["default_whoami"], "user\n")
    assert result["default_uid"]["stdout"].strip() != "0", result["default_uid"]
    command_ok(result["default_home"], "/home/user\n")
    assert result["repeat_mismatches"] == [], "quick commands lost or mixed their output"

    failed_with(client, result["timeout"], "Timeout")
    assert result["timeout_elapsed"] < 8, "a 2 s command timeout must fire well before 10 s"

    stream = result["stream"]
    command_ok(stream["result"], "one\ntwo\n")
    chunks = stream["chunks"]
    assert "".join(chunk["data"] for chunk in chunks) == "one\ntwo\n", chunks
    first = next(chunk for chunk in chunks if "one" in chunk["data"])
    assert "two" not in first["data"], f"output was not streamed: {chunks}"
    assert first["t"] <= stream["end"] - 1.0, f"first chunk arrived at the end: {stream}"

    assert result["cleanup"]["ok"] is True, result["cleanup"]
