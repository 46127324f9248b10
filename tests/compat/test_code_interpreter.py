"""The code interpreter (port 49999) through each pinned official SDK (issue #4).

Contract: shared/e2b-protocol.md §4 (``/execute`` NDJSON, ``/contexts``, semantics). Every
scenario creates its own ``code-interpreter-v1`` sandbox (the SDKs' default template). Each
pin runs on one runtime (``one_runtime_per_client``, tests/compat/conftest.py): both languages
and an old and a new pin reach each runtime.

The module's server (one per runtime) keeps a warm ``code-interpreter-v1`` sandbox, so a
scenario's create takes one whose kernels have already started, and the pool boots the next
while the scenario runs. What a warm sandbox must still get right at claim time (its
environment, cwd, contexts) is what the scenarios assert; cold creates of this template are
proven by the other modules that create it (e.g. tests/compat/test_https_hosts.py).
"""

from __future__ import annotations

import base64
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from tests.fixtures.server import RunningServer

from .clients import REPO_ROOT, PreparedClient
from .expect import assert_sdk_version, error_class, failed_with, timestamp

pytestmark = [pytest.mark.compat, pytest.mark.one_runtime_per_client]

EXAMPLE_DIR = REPO_ROOT / "examples" / "data-analysis"
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


#: One sandbox waits: a scenario runs longer than a boot, so the next create finds it ready.
WARM_POOL = {"templates": {"warm_pool": {"code-interpreter-v1": 1}}}


@pytest.fixture(scope="module")
def runtime_server(runtime_server_factory: Callable[..., RunningServer]) -> Iterator[RunningServer]:
    """This module's server on the ``runtime`` dimension, with a warm code-interpreter pool
    (named as the shared one, so a failed test's report carries its log)."""
    server = runtime_server_factory(config=WARM_POOL)
    yield server
    server.stop()


@pytest.fixture(scope="module")
def runtime_e2b_env(runtime_server: RunningServer) -> dict[str, str]:
    return dict(runtime_server.env)


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
    assert main_text(state) == "42" and "".join(state["stdout"]) == "42\n", state
    assert state["execution_count"] == first["execution_count"] + 1, (first, state)

    error = result["error"]["error"]
    assert error["name"] == "ZeroDivisionError", error
    assert error["value"] == "division by zero", error
    assert "ZeroDivisionError" in error["traceback"], error
    assert main_text(ok(result["after_error"])) == "42"

    assert main_text(ok(result["envs"])) == "cell sandbox"
    assert main_text(ok(result["envs_gone"])) == "unset"
    assert main_text(ok(result["cwd"])) == "/home/user"
    # The kernel starts without ipykernel's debugger import; user code may still import it.
    assert main_text(ok(result["debugpy"])) == "True"
    # The default kernel is the one started before the server's imports (its connection
    # file is ``_prestart``'s), without jedi and the terminal shell; both load on use.
    assert main_text(ok(result["lean_start"])) == "(True, False, False, True, True)"

    stream = result["stream"]
    # The kernel decides how output is cut into messages (ipykernel flushes on a timer, so
    # under load "one" and its newline can arrive apart): compare the text, not the chunks.
    assert "".join(ok(stream["execution"])["stdout"]) == "one\n"
    assert "".join(stream["execution"]["stderr"]) == "warn\n"
    assert main_text(stream["execution"]) == "42"
    events = stream["events"]
    kinds = [event["kind"] for event in events]
    merged = [kind for i, kind in enumerate(kinds) if i == 0 or kind != kinds[i - 1]]
    assert merged == ["stdout", "stderr", "result"], events
    outs = [event for event in events if event["kind"] == "stdout"]
    assert "".join(event["line"] for event in outs) == "one\n"
    assert all(event["error"] is False for event in outs)
    assert all(event["error"] is True for event in events if event["kind"] == "stderr")
    first_out = outs[0]
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
    assert main_text(js_state) == "40" and "".join(js_state["stdout"]) == "js out\n", js_state
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


def texts(execution: dict[str, Any]) -> list[str | None]:
    """Every result's text: R's values are display results, so ``execution.text`` is None
    for R on E2B too."""
    return [result["text"] for result in execution["results"]]


def test_r_and_java_kernels_envs_cwd_contexts_and_users(
    client: PreparedClient, runtime_e2b_env: dict[str, str]
) -> None:
    result = client.run("code_kernels", runtime_e2b_env)
    assert_sdk_version(result, client)

    assert texts(ok(result["r_first"])) == ["[1] 42"]
    r_state = ok(result["r_state"])
    assert "".join(r_state["stdout"]) == "x is 42 \n" and texts(r_state) == ["[1] 42"], r_state
    assert texts(ok(result["r_env"])) == ['[1] "cell sandbox cell"']
    assert texts(ok(result["r_env_gone"])) == ['[1] "unset"']
    assert texts(ok(result["r_cwd"])) == ['[1] "/home/user"']
    r_error = result["r_error"]["error"]
    assert r_error is not None and "r boom" in r_error["value"], result["r_error"]

    assert main_text(ok(result["java_first"])) == "42"
    java_state = ok(result["java_state"])
    assert "".join(java_state["stdout"]) == "x is 40\n" and main_text(java_state) == "80", (
        java_state
    )
    assert main_text(ok(result["java_env"])) == "cell sandbox cell"
    assert main_text(ok(result["java_env_gone"])) == "null"
    assert main_text(ok(result["java_cwd"])) == "/home/user"
    java_error = result["java_error"]["error"]
    assert java_error is not None, result["java_error"]
    assert "IllegalStateException" in java_error["value"], java_error
    assert "java boom" in java_error["value"] and "java boom" in java_error["traceback"]

    assert result["r_ctx"]["language"] == "r" and result["r_ctx"]["cwd"] == "/tmp"
    assert texts(ok(result["r_ctx_cwd"])) == ['[1] "/tmp"']
    assert texts(ok(result["r_ctx_isolated"])) == ["[1] FALSE"]
    assert result["java_ctx"] == {**result["java_ctx"], "language": "java", "cwd": "/tmp/java-work"}
    assert main_text(ok(result["java_ctx_cwd"])) == "/tmp/java-work /tmp/java-work/x.txt"
    listed = result["listed"]
    assert listed[-1] == result["java_ctx"], listed
    assert [c["language"] for c in listed].count("java") == 1, "removed contexts are gone"
    assert "r" not in [c["language"] for c in listed], listed

    assert result["root_ctx"]["status"] == 200, result["root_ctx"]
    assert main_text(ok(result["root_run"])) == "(0, '/root')"
    assert main_text(ok(result["user_ctx_run"])) == "1000"
    unknown = result["unknown_user"]
    assert unknown["status"] == 400 and "does not exist" in unknown["body"], unknown


def chart_of(execution: dict[str, Any]) -> dict[str, Any]:
    """The one figure result of a plotting cell: PNG and chart data together."""
    figures = [r for r in ok(execution)["results"] if r["png"]]
    assert len(figures) == 1, execution
    assert base64.b64decode(figures[0]["png"]).startswith(PNG_MAGIC)
    return figures[0]


def test_dataframes_carry_data_and_figures_carry_typed_charts(
    client: PreparedClient, runtime_e2b_env: dict[str, str]
) -> None:
    result = client.run("code_charts", runtime_e2b_env)
    assert_sdk_version(result, client)
    typed = client.lang == "python"  # the Python SDK builds chart classes; JS keeps objects

    frame = ok(result["frame"])["results"][0]
    assert frame["is_main_result"] is True and "<table" in frame["html"], frame
    assert frame["data"] == {
        "city": ["Oslo", "Rome"],
        "temp": [3.5, None],
        "when": ["2024-01-01T00:00:00", "2024-01-02T00:00:00"],
    }
    big = ok(result["big_frame"])["results"][0]
    assert big["data"] is None and "<table" in big["html"], "a huge frame carries no data"

    line = chart_of(result["line"])
    chart = line["chart"]
    assert (chart["type"], chart["title"]) == ("line", "Weather"), chart
    assert (chart["x_label"], chart["y_label"]) == ("Day", "Temperature (C)")
    assert (chart["x_unit"], chart["y_unit"]) == (None, "C")
    assert (chart["x_scale"], chart["y_scale"]) == ("datetime", "linear")
    assert [e["label"] for e in chart["elements"]] == ["temp", "rain"]
    assert chart["elements"][0]["points"] == [
        ["2024-01-01T00:00:00+00:00", 1.5],
        ["2024-01-02T00:00:00+00:00", 2.5],
        ["2024-01-03T00:00:00+00:00", 2.0],
    ]
    assert all(isinstance(tick, str) for tick in chart["x_ticks"]), chart["x_ticks"]
    assert len(chart["y_ticks"]) == len(chart["y_tick_labels"]) > 1
    assert not typed or line["chart_class"] == "LineChart"

    scatter = chart_of(result["scatter"])
    chart = scatter["chart"]
    assert (chart["type"], chart["y_scale"]) == ("scatter", "log"), chart
    assert [(e["label"], e["points"]) for e in chart["elements"]] == [
        ("first", [[1.0, 4.0], [2.0, 5.0], [3.0, 6.0]]),
        ("second", [[7.0, 9.0], [8.0, 10.0]]),
    ]
    assert not typed or scatter["chart_class"] == "ScatterChart"

    bar = chart_of(result["bar"])
    chart = bar["chart"]
    assert (chart["type"], chart["title"], chart["x_label"]) == ("bar", "Book Sales", "Authors")
    assert chart["y_unit"] == "units", chart
    assert chart["elements"] == [
        {"label": "Author A", "group": "Books Sold", "value": 100.0},
        {"label": "Author B", "group": "Books Sold", "value": 200.0},
        {"label": "Author C", "group": "Books Sold", "value": 300.0},
    ]
    assert not typed or bar["chart_class"] == "BarChart"

    pie = chart_of(result["pie"])
    assert pie["chart"]["type"] == "pie" and pie["chart"]["title"] == "Early tomorrow?"
    assert pie["chart"]["elements"] == [
        {"label": "No", "angle": 324.0, "radius": 1.0},
        {"label": "Yes", "angle": 36.0, "radius": 1.0},
    ]
    assert not typed or pie["chart_class"] == "PieChart"

    box = chart_of(result["box"])
    chart = box["chart"]
    assert (chart["type"], chart["x_label"], chart["y_label"]) == (
        "box_and_whisker",
        "Class",
        "Score",
    )
    assert chart["elements"] == [
        {
            "label": "A",
            "min": 1.0,
            "first_quartile": 2.25,
            "median": 3.5,
            "third_quartile": 4.75,
            "max": 5.0,
            "outliers": [40.0],
        },
        {
            "label": "B",
            "min": 2.0,
            "first_quartile": 2.5,
            "median": 3.0,
            "third_quartile": 3.5,
            "max": 4.0,
            "outliers": [],
        },
    ]
    assert not typed or box["chart_class"] == "BoxAndWhiskerChart"

    both = chart_of(result["super"])
    chart = both["chart"]
    assert (chart["type"], chart["title"]) == ("superchart", "Two charts"), chart
    assert [(c["type"], c["title"]) for c in chart["elements"]] == [
        ("line", "Squares"),
        ("bar", None),
    ]
    assert [e["label"] for e in chart["elements"][1]["elements"]] == ["x", "y"]
    assert not typed or both["chart_class"] == "SuperChart"

    assert chart_of(result["blank"])["chart"] is None, "an empty figure has no chart"


def test_killed_kernels_and_servers_come_back_and_a_killed_sandbox_ends_run_code(
    client: PreparedClient, runtime_e2b_env: dict[str, str]
) -> None:
    result = client.run("code_recovery", runtime_e2b_env)
    assert_sdk_version(result, client)

    assert result["kill_kernel"]["exit_code"] == 0, result["kill_kernel"]
    after = ok(result["after_kernel_kill"])
    assert main_text(after) == "(False, 2)", after
    assert any("had stopped" in line for line in after["stderr"]), after["stderr"]
    assert main_text(ok(result["ctx_untouched"])) == "2", "other contexts keep their kernels"

    assert result["kill_server"]["exit_code"] == 0, result["kill_server"]
    after = ok(result["after_server_kill"])
    assert main_text(after) == "2", after
    assert any("was restarted" in line for line in after["stderr"]), after["stderr"]
    assert main_text(ok(result["ctx_after_server_kill"])) == "(False, '/tmp')"
    assert result["ctx_id"] in result["listed_after"]

    assert result["cell_running"] is True and result["kill"]["ok"] is True, result
    killed = result["killed_mid_cell"]
    error = failed_with(client, killed, "Timeout")
    assert "sandbox was killed" in error["message"], error
    assert killed["elapsed"] < 30, killed
