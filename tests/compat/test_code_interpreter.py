"""The code interpreter (port 49999) through each pinned official SDK (issue #4).

Contract: shared/e2b-protocol.md §4 (``/execute`` NDJSON, ``/contexts``, semantics). Every
scenario creates its own ``code-interpreter-v1`` sandbox (the SDKs' default template).
"""

from __future__ import annotations

import base64
from typing import Any

import pytest

from .clients import REPO_ROOT, PreparedClient
from .expect import assert_sdk_version, error_class, failed_with, timestamp

pytestmark = pytest.mark.compat

EXAMPLE_DIR = REPO_ROOT / "examples" / "data-analysis"
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


@pytest.fixture(scope="module")
def basic(client: PreparedClient, runtime_e2b_env: dict[str, str]) -> dict[str, Any]:
    """One ``code_basic`` run per client, shared by the tests that read parts of it."""
    return client.run("code_basic", runtime_e2b_env)


def main_text(execution: dict[str, Any]) -> str | None:
    return execution["text"]


def ok(execution: dict[str, Any]) -> dict[str, Any]:
    assert execution["error"] is None, execution
    return execution


def test_run_code_state_languages_errors_envs_and_streaming(
    client: PreparedClient, basic: dict[str, Any]
) -> None:
    result = basic
    assert_sdk_version(result, client)

    first = ok(result["first"])
    assert main_text(first) == "42"
    assert first["results"][0]["is_main_result"] is True
    state = ok(result["state"])
    assert main_text(state) == "42" and state["stdout"] == ["42\n"], state
    assert state["execution_count"] == first["execution_count"] + 1, (first, state)

    error = result["error"]["error"]
    assert error["name"] == "ZeroDivisionError", error
    assert error["value"] == "division by zero", error
    assert "ZeroDivisionError" in error["traceback"], error
    assert main_text(ok(result["after_error"])) == "42"

    assert main_text(ok(result["envs"])) == "cell sandbox"
    assert main_text(ok(result["envs_gone"])) == "unset"
    assert main_text(ok(result["cwd"])) == "/home/user"

    stream = result["stream"]
    assert ok(stream["execution"])["stdout"] == ["one\n"]
    assert stream["execution"]["stderr"] == ["warn\n"]
    assert main_text(stream["execution"]) == "42"
    kinds = [event["kind"] for event in stream["events"]]
    assert kinds == ["stdout", "stderr", "result"], stream["events"]
    first_out = stream["events"][0]
    assert first_out["line"] == "one\n" and first_out["error"] is False
    assert stream["events"][1]["error"] is True
    assert first_out["t"] <= stream["end"] - 1.0, f"stdout was not streamed: {stream}"
    if client.lang == "python":
        timestamp(first_out["timestamp"])  # ours: ISO 8601 with a zone (JS uses client time)
    assert result["on_error"] == [
        {
            "name": "ValueError",
            "value": "bad value",
            "traceback": result["on_error"][0]["traceback"],
        }
    ]
    assert "bad value" in result["on_error"][0]["traceback"]


def test_rich_results_display_and_matplotlib(client: PreparedClient, basic: dict[str, Any]) -> None:
    result = basic

    rich = ok(result["rich"])
    shown, main = rich["results"]
    assert shown["is_main_result"] is False and shown["html"] == "<i>shown</i>", shown
    assert main["is_main_result"] is True
    assert main["text"] == "Everything()"
    assert main["html"] == "<b>html</b>"
    assert main["markdown"] == "**md**"
    assert main["svg"].startswith("<svg")
    assert base64.b64decode(main["png"]) == b"\x89PNG fake"
    assert base64.b64decode(main["jpeg"]) == b"\xff\xd8 fake"
    assert base64.b64decode(main["pdf"]) == b"%PDF fake"
    assert main["latex"] == "$\\alpha$"
    assert main["json"] == {"answer": 42}
    assert main["javascript"] == "console.log(1)"

    plot = ok(result["plot"])
    figures = [r for r in plot["results"] if r["png"]]
    assert len(figures) == 1, plot
    assert base64.b64decode(figures[0]["png"]).startswith(PNG_MAGIC)
    assert figures[0]["is_main_result"] is False

    frame = ok(result["dataframe"])["results"][0]
    assert "<table" in frame["html"] and "a" in frame["text"], frame
    assert main_text(ok(result["imports"])) == "3"


def test_javascript_typescript_and_bash_kernels(
    client: PreparedClient, basic: dict[str, Any]
) -> None:
    result = basic

    assert main_text(ok(result["js"])) == "21"
    js_state = ok(result["js_state"])
    assert main_text(js_state) == "40" and js_state["stdout"] == ["js out\n"], js_state
    assert main_text(ok(result["js_env"])) == "on"
    js_error = result["js_error"]["error"]
    assert js_error is not None and "js boom" in js_error["value"], js_error
    assert main_text(ok(result["ts"])) == "1024"

    assert "".join(ok(result["bash"])["stdout"]) == "hello 10 env\n"
    assert "".join(ok(result["bash_state"])["stdout"]) == "z=5\n"
    assert main_text(ok(result["python_unaffected"])) == "42"


def test_code_contexts(client: PreparedClient, runtime_e2b_env: dict[str, str]) -> None:
    result = client.run("code_contexts", runtime_e2b_env)
    assert_sdk_version(result, client)

    created = result["created"]
    assert created["language"] == "python" and created["cwd"] == "/tmp", created
    listed = result["listed"]
    assert listed[-1] == created, "a new context must be listed last"
    assert {"python", "javascript"} <= {c["language"] for c in listed[:-1]}, listed

    isolated = result["isolated"]["error"]
    assert isolated["name"] == "NameError", isolated
    assert isolated["value"] == "name 'shared' is not defined"
    assert main_text(ok(result["ctx_cwd"])) == "/tmp"
    assert main_text(ok(result["ctx_state"])) == "2"
    restarted = result["restarted"]["error"]
    assert restarted["name"] == "NameError" and restarted["value"] == "name 'mine' is not defined"
    assert main_text(ok(result["default_kept"])) == "default"

    assert result["js_created"]["language"] == "javascript"
    assert main_text(ok(result["js_run"])) == "9"

    assert created["id"] not in result["after_remove"]
    assert result["js_created"]["id"] in result["after_remove"]
    failed_with(client, result["run_removed"], "NotFound")
    both = result["both"]
    assert both["ok"] is False, both
    assert error_class(client, "Sandbox") in both["error"]["classes"], both


def test_timeouts_crashes_and_output_limits(
    client: PreparedClient, runtime_e2b_env: dict[str, str]
) -> None:
    result = client.run("code_limits", runtime_e2b_env)
    assert_sdk_version(result, client)

    failed_with(client, result["timeout"], "Timeout")
    assert result["timeout_elapsed"] < 10, result["timeout_elapsed"]
    # The timed-out cell slept 60 s: getting an answer at once proves the disconnect
    # interrupted the kernel, and the state survived the interrupt.
    assert main_text(ok(result["after_timeout"])) == "state"
    assert result["after_timeout_elapsed"] < 10, result["after_timeout_elapsed"]

    crash = result["crash"]["error"]
    assert crash is not None and crash["name"] == "KernelDied", result["crash"]
    assert "restarted" in crash["value"]
    assert main_text(ok(result["after_crash"])) == "(False, 2)"

    flood = result["flood"]
    assert flood["error"] is not None and flood["error"]["name"] == "OutputLimitExceeded", flood
    assert 0 < flood["stdout_bytes"] <= 17 * 1024 * 1024, flood["stdout_bytes"]
    assert any("output truncated" in line for line in flood["stderr"]), flood["stderr"]
    assert result["flood_elapsed"] < 60, result["flood_elapsed"]
    assert main_text(ok(result["after_flood"])) == "again", "the kernel must survive the flood"


def test_data_analysis_example(client: PreparedClient, runtime_e2b_env: dict[str, str]) -> None:
    result = client.run("code_data_analysis", runtime_e2b_env, [str(EXAMPLE_DIR)])
    assert_sdk_version(result, client)

    summary = result["summary"]
    assert summary["rows"] == 6
    assert summary["top_region"] == "east"
    assert summary["by_region"] == {"east": 325.25, "north": 162.5, "south": 179.75}
    assert summary["total"] == pytest.approx(667.5)
    assert bytes.fromhex(result["chart_magic"]) == PNG_MAGIC
    assert result["chart_bytes"] > 1000
    assert "analysed 6 rows; top region east" in result["stdout"]
    assert result["still_listed"] == [], "the sandbox must be killed"
