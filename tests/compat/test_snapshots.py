"""Snapshots, forks, pause and lifecycle (issue 18) with every pinned official SDK, on both
runtimes: what each call returns, and what the sandboxes it makes hold.

Contract: shared/e2b-protocol.md §2.3; docs/compatibility.md ("Snapshots, pause, lifecycle").
"""

from __future__ import annotations

import re
import secrets
from typing import Any

import pytest

from .clients import PreparedClient
from .expect import assert_sdk_version, command_ok, failed_with, sdk_version

pytestmark = [pytest.mark.compat, pytest.mark.one_runtime_per_client]

#: The probe's output in the source after a snapshot, and in a sandbox made from one.
SOURCE_AFTER = "before the snapshot\nno-issue\nbar\nsleeping\n"
RESTORED = "before the snapshot\nno-issue\nbar\nno-sleep\n"


def _has_fork(client: PreparedClient) -> bool:
    """``fork`` arrived in py 2.45 and JS 2.51 (e2b-protocol.md §2.3)."""
    major, minor, _ = (int(p) for p in sdk_version(client).split("."))
    return (major, minor) >= ((2, 45) if client.lang == "python" else (2, 51))


def test_snapshots_and_forks(client: PreparedClient, runtime_e2b_env: dict[str, str]) -> None:
    tag = "snap" + secrets.token_hex(4)
    result = client.run("snapshots", runtime_e2b_env, [tag])
    assert_sdk_version(result, client)

    unnamed, named = result["unnamed"], result["named"]
    assert re.fullmatch(r"[a-z0-9]{20}:default", unnamed["snapshot_id"]), unnamed
    assert unnamed["names"] == [], unnamed
    assert re.fullmatch(rf"[a-z0-9-]+/{tag}:default", named["snapshot_id"]), named
    assert named["names"] == [named["snapshot_id"]], named
    command_ok(result["source_after"], SOURCE_AFTER)  # frozen for the copy, then thawed
    assert sorted(result["listed"]) == sorted([unnamed["snapshot_id"], named["snapshot_id"]])

    command_ok(result["restored"], RESTORED)  # files, whiteouts, envs; no processes
    command_ok(result["by_name"], RESTORED)

    assert result["fork_via"] == ("sdk" if _has_fork(client) else "http")
    if result["fork_via"] == "http":
        assert result["fork_status"] == 201
    forks = result["forks"]
    assert len(forks) == 2 and all("id" in fork for fork in forks), forks
    assert len({fork["id"] for fork in forks}) == 2
    for fork in forks:
        # The fork was taken after the note changed: it has the newer file.
        command_ok(fork["probe"], "after the snapshot\nno-issue\nbar\nno-sleep\n")

    assert result["delete"] == {"ok": True, "value": True}, result["delete"]
    assert result["delete_again"] == {"ok": True, "value": False}, result["delete_again"]
    error = failed_with(client, result["create_deleted"], "Sandbox")
    assert "not found" in error["message"].lower() or "404" in error["message"], error
    assert result["delete_named"] == {"ok": True, "value": True}
    assert result["listed_after"] == []
    # A sandbox made from a snapshot owns its files: deleting the snapshot changes nothing.
    command_ok(result["restored_after_delete"], RESTORED)
    assert all(item["ok"] for item in result["cleanup"]), result["cleanup"]


def test_pause_with_and_without_memory(
    client: PreparedClient, runtime_e2b_env: dict[str, str]
) -> None:
    result = client.run("pause_resume", runtime_e2b_env)
    assert_sdk_version(result, client)

    assert result["pause_memory"] is True
    assert result["info_memory"]["state"] == "paused"
    assert result["running_memory"] is False
    assert result["pause_again"] == {"ok": True, "value": False}, "409: already paused"
    command_ok(result["probe_memory"], "kept\nsleeping\n")  # memory kept

    assert result["pause_disk"] is True
    assert result["info_disk"]["state"] == "paused"
    assert result["running_disk"] is False
    assert result["pause_disk_again"] == {"ok": True, "value": False}
    assert result["cold_id"] == result["sandbox_id"]
    command_ok(result["probe_disk"], "kept\nno-sleep\n")  # files kept, a cold boot
    assert result["info_after"]["state"] == "running"
    assert result["token_kept"] is True
    assert result["cleanup"] == {"ok": True, "value": True}


def test_lifecycle_on_timeout(client: PreparedClient, runtime_e2b_env: dict[str, str]) -> None:
    result = client.run("lifecycle_timeout", runtime_e2b_env, timeout=400)
    assert_sdk_version(result, client)
    assert result["served_before"] is True
    assert result["lifecycle_info"] == {"on_timeout": "pause", "auto_resume": True}

    # on_timeout=pause, auto_resume: paused by the reaper; a request without its token does
    # not wake it (502, as for any paused sandbox); one to its port with its traffic token
    # does, served from memory.
    assert result["woken_paused"] is True
    assert result["woken_health_without_token"] == 502
    assert result["woken_state_after_health"] == "paused"
    assert result["woken_response"] == {"status": 200, "body": "served after waking"}
    assert result["woken_state"] == "running"

    # on_timeout=kill: gone.
    assert result["killed_gone"] is True
    failed_with(client, result["killed_info"], "NotFound")

    # on_timeout=pause without memory: paused to disk; connect cold-boots it with its file.
    assert result["stored_paused"] is True
    assert result["stored_is_running"] is False
    assert _text(result["stored_note"]) == "kept on disk"
    assert result["stored_state"] == "running"


def _text(value: Any) -> str:
    return value if isinstance(value, str) else str(value)
