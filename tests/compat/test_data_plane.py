"""The sandbox data plane (issue 3) through each pinned official SDK.

Contract: shared/e2b-protocol.md §3 (envd: ``process.Process``, ``filesystem.Filesystem``,
``/files``, signed URLs, ``/health``) and §1.5 (ports through ``Host: <port>-<id>.<domain>``
and the routing headers). Every scenario creates its own sandbox and prints one JSON object;
each test asserts that object. All four pinned clients offer every feature exercised here
(checked against their APIs: ``close_stdin``, ``pty.resize``, ``write_files``, ``gzip``,
``metadata``, ``upload_url``/``download_url`` with ``use_signature_expiration``).
"""

from __future__ import annotations

from typing import Any

import pytest

from .clients import PreparedClient
from .expect import assert_sdk_version, command_ok, failed_with, timestamp

pytestmark = [pytest.mark.compat, pytest.mark.one_runtime_per_client]


def _ok(outcome: dict[str, Any]) -> Any:
    assert outcome["ok"] is True, outcome
    return outcome["value"]


def _exit_error(client: PreparedClient, outcome: dict[str, Any], code: int) -> dict[str, Any]:
    error = failed_with(client, outcome, "CommandExit")
    exit_code = error["exit_code"] if client.lang == "python" else error["exitCode"]
    assert exit_code == code, error
    return error


def _no_scenario_error(result: dict[str, Any]) -> None:
    assert "scenario_error" not in result, result["scenario_error"]
    assert result["cleanup"]["ok"] is True, result["cleanup"]


# --------------------------------------------------------------------------------------------
# Commands


def test_commands(client: PreparedClient, runtime_e2b_env: dict[str, str]) -> None:
    result = client.run("data_commands", runtime_e2b_env)
    assert_sdk_version(result, client)
    _no_scenario_error(result)

    # Env layering: sandbox < command; command envs do not leak into later commands.
    command_ok(_ok(result["bg_envs"]), "sandbox command x\n")
    command_ok(result["envs_after"], "sandbox sandbox unset\n")
    command_ok(_ok(result["bg_cwd"]), "/tmp\n")
    failed_with(client, result["missing_cwd"], "InvalidArgument")
    command_ok(_ok(result["bg_root"]), "root\n0\n")
    user = _ok(result["bg_user"])
    assert user["stdout"].startswith("user\n") and not user["stdout"].endswith("\n0\n"), user

    # stdin on: both send paths reach the process, output is live, close gives EOF.
    assert result["stdin_echo_seen"] is True, "stdin data was not echoed while running"
    assert result["close_stdin"]["ok"] is True, result["close_stdin"]
    command_ok(_ok(result["stdin_on"]), "hello world\neof\n")
    # stdin off (default): EOF at once, and input is refused with an error.
    command_ok(result["stdin_off"], "eof\n")
    assert result["send_stdin_without_stdin"]["ok"] is False, result["send_stdin_without_stdin"]
    assert result["close_stdin_without_stdin"]["ok"] is False, result

    listed = result["list"]
    assert len(listed) == 1, listed
    assert listed[0]["cmd"] == "/bin/bash" and listed[0]["args"][-1] == "sleep 300", listed

    # Kill: True; the waiting stream ends with an exit error; the child of the command dies too.
    assert result["kill_child_alive_before"] is True, result["kill_child_pid"]
    assert result["kill"] is True
    _exit_error(client, result["kill_wait"], -1)
    assert result["kill_child_gone"] is True, "killing a command left its child running"
    assert result["kill_again"] is False and result["kill_unknown"] is False
    assert result["kill_sleeper"] is True

    # timeout = process lifetime: TimeoutException after ~3 s, and the whole group is gone.
    timeout = failed_with(client, result["timeout_wait"], "Timeout")
    assert 2.0 <= result["timeout_wait"]["elapsed"] < 10, (timeout, result["timeout_wait"])
    assert result["timeout_child_gone"] is True, "a timed-out command left its child running"
    assert result["timeout_in_list"] is False

    # Output callbacks arrive as produced, not at the end.
    stream = result["stream"]
    command_ok(_ok(stream["wait"]), "one\ntwo\n", "e1\ne2\n")
    chunks = stream["chunks"]
    first_out = next(c for c in chunks if "one" in c["data"])
    first_err = next(c for c in chunks if "e1" in c["data"])
    last = max(c["t"] for c in chunks)
    assert "two" not in first_out["data"], chunks
    assert first_out["t"] <= last - 1.0 and first_err["t"] <= last - 1.0, chunks

    error = _exit_error(client, result["exit_error"], 3)
    assert error["stdout"] == "out\n" and error["stderr"] == "err\n", error
    error = _exit_error(client, result["exit_error_bg"], 4)
    assert error["stdout"] == "bg-out\n", error

    # Exit status retained for a late connect; unknown pid → NotFound.
    assert result["late_exited"] is True
    _exit_error(client, result["late_connect"], 7)
    failed_with(client, result["connect_unknown"], "NotFound")

    # Disconnect never kills.
    assert result["disconnect_running"] is True
    assert result["after_disconnect"] == "finished\n"

    # A second client object connects, drives stdin and receives the output and the end.
    second = result["second_client"]
    assert second["pid"] == second["expected_pid"], second
    error = _exit_error(client, second["wait"], 5)
    assert error["stdout"] == "got over-there\n", error


# --------------------------------------------------------------------------------------------
# PTY


def test_pty(client: PreparedClient, runtime_e2b_env: dict[str, str]) -> None:
    result = client.run("data_pty", runtime_e2b_env)
    assert_sdk_version(result, client)
    _no_scenario_error(result)

    assert result["listed"] is True, "a PTY must appear in commands.list()"
    assert result["initial_size"] is True, "stty size did not report the created 24x80"
    assert result["resized"] is True, "stty size did not report 40x132 after resize"
    assert result["colour"] is True, "raw ESC colour sequences did not arrive unchanged"
    assert result["env"] is True, "PTY default TERM or user is wrong"
    assert result["kill"] is True
    _exit_error(client, result["kill_wait"], -1)
    assert result["kill_again"] is False
    assert result["reconnected_output"] is True, "pty.connect(pid) received no live output"
    assert _ok(result["exit_wait"])["exit_code"] == 0, result["exit_wait"]


# --------------------------------------------------------------------------------------------
# Files

ROOT = "/home/user/dp"
WANTED_EVENTS = {
    ("sub/new.txt", "create"),
    ("sub/new.txt", "write"),
    ("sub/new.txt", "chmod"),
    ("sub/new.txt", "rename"),
    ("sub/moved.txt", "create"),
    ("sub/moved.txt", "remove"),
}


def _written(entry: dict[str, Any], path: str) -> None:
    assert entry["path"] == path and entry["name"] == path.rsplit("/", 1)[1], entry
    assert entry["type"] == "file", entry


def test_files(client: PreparedClient, runtime_e2b_env: dict[str, str]) -> None:
    result = client.run("data_files", runtime_e2b_env)
    assert_sdk_version(result, client)
    _no_scenario_error(result)

    _written(result["write_text"], f"{ROOT}/a.txt")
    assert result["read_text"] == "héllo\n"
    assert result["read_bytes_of_text"] == "héllo\n".encode().hex()
    assert result["binary_roundtrip"] is True
    assert result["stream_roundtrip"] is True
    assert result["stream_chunks"] > 1, "a 3 MiB streamed read arrived as one chunk"
    paths = [f"{ROOT}/many/one.txt", f"{ROOT}/many/two.bin", f"{ROOT}/many/deep/three.txt"]
    for entry, path in zip(result["write_files"], paths, strict=True):
        _written(entry, path)
    assert result["write_files_read"] == ["1", "0002", "3"]
    _written(result["parents"], f"{ROOT}/p/q/r/s.txt")
    assert result["parents_read"] == "deep"
    assert result["overwrite_read"] == "second"
    failed_with(client, result["read_missing"], "FileNotFound")
    failed_with(client, result["read_dir"], "InvalidArgument")

    tree = f"{ROOT}/tree"
    assert result["list"] == {
        "1": [f"{tree}/a", f"{tree}/z.txt"],
        "2": [f"{tree}/a", f"{tree}/a/b", f"{tree}/a/x.txt", f"{tree}/z.txt"],
        "3": [f"{tree}/a", f"{tree}/a/b", f"{tree}/a/b/c.txt", f"{tree}/a/x.txt", f"{tree}/z.txt"],
    }
    failed_with(client, result["list_missing"], "FileNotFound")

    assert result["exists"] == [True, False]
    info = result["info_file"]
    assert {k: info[k] for k in ("name", "type", "path", "size", "mode", "permissions")} == {
        "name": "a.txt",
        "type": "file",
        "path": f"{ROOT}/a.txt",
        "size": 6,
        "mode": 0o640,
        "permissions": "-rw-r-----",
    }
    assert (info["owner"], info["group"], info["symlink_target"]) == ("user", "user", None)
    assert timestamp(info["modified_time"]) == 981173106.0, info
    assert result["info_dir"]["type"] == "dir" and result["info_dir"]["permissions"][0] == "d"
    link = result["info_link"]
    assert link["type"] == "file" and link["symlink_target"] == f"{ROOT}/a.txt", link
    assert link["mode"] == 0o640, "a symlink reports its target's permission bits"
    dirlink = result["info_dirlink"]
    assert dirlink["type"] == "dir" and dirlink["symlink_target"] == tree, dirlink
    root_file = result["info_root_file"]
    assert (root_file["owner"], root_file["group"]) == ("root", "root"), root_file
    failed_with(client, result["info_missing"], "FileNotFound")

    assert result["make_dir"] == [True, False, False]
    assert result["rename"]["path"] == f"{ROOT}/ren/dst.txt", result["rename"]
    assert result["rename_after"] == [False, "moving"]
    failed_with(client, result["rename_missing"], "NotFound")
    assert result["remove_after"] == [False, False]
    assert result["remove_missing"]["ok"] is True, result["remove_missing"]

    events = {(name, kind.lower()) for name, kind in result["watch_events"]}
    assert result["watch_complete"] is True, result["watch_events"]
    assert events >= WANTED_EVENTS, result["watch_events"]
    failed_with(client, result["watch_missing"], "NotFound")

    _written(_ok(result["gzip_write"]), f"{ROOT}/gz.bin")
    assert _ok(result["gzip_read"]) is True

    written = _ok(result["metadata_write"])
    assert written["metadata"] == {"owner-team": "blue", "x": "1"}, written
    assert result["metadata_info"] == {"owner-team": "blue", "x": "1"}
    assert result["metadata_replaced"] == {}, "an upload without metadata must clear it"

    upload = result["signed_upload"]
    assert upload["status"] == 200, upload
    assert result["signed_download"] == {"status": 200, "body": "via signed url"}
    assert result["signed_tampered"]["status"] == 401, result["signed_tampered"]
    assert result["expiring_first"] == 200
    assert result["expired"] == {
        "status": 401,
        "body": {"code": 401, "message": "signature is already expired"},
    }


# --------------------------------------------------------------------------------------------
# Ports and a sandbox killed during a command


def test_ports_and_killed_sandbox(client: PreparedClient, runtime_e2b_env: dict[str, str]) -> None:
    result = client.run("data_ports", runtime_e2b_env)
    assert_sdk_version(result, client)
    _no_scenario_error(result)

    sandbox_id = result["sandbox_id"]
    assert result["host"] == f"8000-{sandbox_id}.{runtime_e2b_env['E2B_DOMAIN']}"
    assert result["by_host"] == {"status": 200, "body": "served from inside"}
    assert result["by_headers"] == {"status": 200, "body": "served from inside"}
    # Ports are private by default (E2B: public); the SDK carries the token it was given.
    assert result["traffic_token_set"] is True
    assert result["without_token"]["status"] == 401, result["without_token"]
    assert "E2B-Traffic-Access-Token" in result["without_token"]["body"]["message"]
    assert result["public_traffic_token"] is None
    assert result["public_port"] == {"status": 200, "body": "public"}
    closed = result["closed_port"]
    assert closed["status"] == 502, closed
    assert closed["body"]["code"] == 502 and closed["body"]["port"] == 8001, closed
    assert closed["body"]["sandboxId"] == sandbox_id, closed
    command_ok(result["interfaces"], "lo\n")

    assert result["killed"] is True
    killed = failed_with(client, result["stream_after_kill"], "Timeout")
    assert "sandbox was killed or reached its end of life" in killed["message"], killed
    assert result["is_running_after_kill"] is False
    late = result["run_after_kill"]
    assert late["ok"] is False, late
    # Python raises TimeoutException; JS reports the 502 as SandboxNotFoundError (2.51) or
    # TimeoutError: both are the SDK's "sandbox is gone" errors.
    assert {"TimeoutException", "TimeoutError", "SandboxNotFoundError"} & set(
        late["error"]["classes"]
    ), late
    command_ok(result["neighbour"], "ok\n")
    assert result["neighbour_running"] is True


# --------------------------------------------------------------------------------------------
# Details E2B's own clients rely on (issue 18)

#: What envd's in-place write causes, by kind of write (see guest/_inotify.py ``published``).
NEW_FILE = ["create", "chmod", "write"]
OVERWRITE = ["chmod", "write"]
EMPTY_NEW_FILE = ["create", "chmod"]
NEW_FILE_WITH_METADATA = ["create", "chmod", "write", "chmod"]
KILLED = "sandbox was killed or reached its end of life"


def _of(events: list[list[str]], name: str) -> list[str]:
    return [kind for event_name, kind in events if event_name == name]


def test_data_plane_details(client: PreparedClient, runtime_e2b_env: dict[str, str]) -> None:
    result = client.run("data_details", runtime_e2b_env)
    assert_sdk_version(result, client)
    _no_scenario_error(result)

    # A signed upload URL takes a form whose 'file' part is a plain field: ?path names it.
    plain = result["plain_field"]
    assert plain["status"] == 200, plain
    assert _ok(result["plain_field_read"]) == "a plain field"
    if client.lang == "js":  # Python's upload_url() needs a path
        nowhere = result["plain_field_no_path"]
        assert nowhere["status"] == 400 and "filename" in nowhere["body"], nowhere

    # /proc and /sys through the files API: what `cat` shows the same user in the sandbox
    # (its own uid map, hostname; no sysfs on bwrap: absent both ways).
    for path, both in result["kernel_files"].items():
        if both["cat"] == "MISSING\n":
            failed_with(client, both["read"], "FileNotFound")
        else:
            assert _ok(both["read"]) == both["cat"], (path, both)
    assert "/proc/sys/kernel/random/boot_id" in result["kernel_files"]
    assert result["kernel_files"]["/proc/sys/kernel/random/boot_id"]["cat"] != "MISSING\n"
    uid_map = result["kernel_files"]["/proc/self/uid_map"]["cat"].split()
    assert uid_map[:1] == ["0"] and uid_map[1] != "0", "the sandbox's own namespace, not the host's"
    uid_line = next(line for line in _ok(result["status"]).splitlines() if line.startswith("Uid:"))
    assert uid_line.split()[1] == result["id"] != "0", uid_line
    # Kernel files that are not data are refused with a clear error, never streamed forever.
    pagemap = failed_with(client, result["pagemap"], "InvalidArgument")
    assert "16 MiB" in pagemap["message"], pagemap
    mem = failed_with(client, result["mem"], "InvalidArgument")
    assert "not serve this file as data" in mem["message"], mem
    fifo = failed_with(client, result["fifo"], "InvalidArgument")
    assert "not a regular file" in fifo["message"], fifo

    # A write's watch events, as envd gives them: counted right after the write returns
    # (Python's polling watcher), and in order on the stream.
    if client.lang == "python":
        assert result["polled_new"] == [["new.txt", kind] for kind in NEW_FILE]
        assert result["polled_overwrite"] == [["new.txt", kind] for kind in OVERWRITE]
        assert result["polled_empty"] == [["empty.txt", kind] for kind in EMPTY_NEW_FILE]
        assert result["polled_metadata"] == [["meta.txt", k] for k in NEW_FILE_WITH_METADATA]
        assert result["polled_recursive"] == [["sub/nested.txt", kind] for kind in NEW_FILE]
    streamed = result["streamed"]
    assert streamed["complete"] is True, streamed
    assert _of(streamed["events"], "a.txt") == NEW_FILE + OVERWRITE, streamed
    assert _of(streamed["events"], "sentinel.txt") == NEW_FILE, streamed
    if client.lang == "js":
        assert _of(streamed["events"], "empty.txt") == EMPTY_NEW_FILE, streamed
        assert _of(streamed["events"], "meta.txt") == NEW_FILE_WITH_METADATA, streamed

    # A command whose sandbox is killed: the SDK's own "sandbox was killed" error.
    assert result["killed"] is True
    killed = failed_with(client, result["killed_wait"], "Timeout")
    assert KILLED in killed["message"], killed
