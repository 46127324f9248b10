"""The web console in a real headless Chromium against a real ``sandgate serve``: sign in,
the live sandbox list, the terminal, approvals, audit and a run's trace, on both runtimes.

Screenshots of each page are written to ``$SANDGATE_CONSOLE_SCREENSHOTS`` when it is set
(docs/console.md shows them); otherwise to the test's temporary directory.
"""

from __future__ import annotations

import os
import re
import secrets
import time
from pathlib import Path

import httpx
import pytest
from playwright.sync_api import Page, Route, expect

from tests.framework.envd import run
from tests.framework.model_server import code, text
from tests.framework.template_api import start_build, wait_build
from tests.integration.console.conftest import CANARY, ConsoleEnv, sign_in


@pytest.fixture
def shots(tmp_path: Path) -> Path:
    target = os.environ.get("SANDGATE_CONSOLE_SCREENSHOTS")
    directory = Path(target) if target else tmp_path
    directory.mkdir(parents=True, exist_ok=True)
    return directory


def _kill(env: ConsoleEnv, sandbox_id: str) -> None:
    with env.api() as api:
        api.delete(f"/sandboxes/{sandbox_id}")


def test_sign_in_refuses_a_wrong_key_and_sets_a_strict_http_only_cookie(
    console_env: ConsoleEnv, page: Page, shots: Path
) -> None:
    page.goto(f"{console_env.server.url}/ui/sandboxes")
    expect(page).to_have_url(re.compile(r"/ui/login"))
    page.screenshot(path=str(shots / "login.png"))
    page.fill("input[name=api_key]", "e2b_" + "0" * 40)
    page.click("button[type=submit]")
    expect(page.locator("#login-error")).to_contain_text("Invalid API key")
    assert page.context.cookies() == []
    sign_in(page, console_env)
    (cookie,) = page.context.cookies()
    assert cookie["httpOnly"] is True and cookie["sameSite"] == "Strict"
    assert cookie["path"] == "/ui" and console_env.full_key not in cookie["value"]


def test_a_sandbox_created_through_the_api_appears_without_reloading(
    console_env: ConsoleEnv, page: Page, shots: Path
) -> None:
    sign_in(page, console_env)
    page.evaluate("window.__same_page = true")
    box = console_env.sandbox(metadata={"purpose": "console-live"})
    try:
        row = page.locator(f"tr[data-sandbox='{box['sandboxID']}']")
        expect(row).to_be_visible()
        expect(row).to_contain_text("running")
        expect(row).to_contain_text("purpose=console-live")
        assert page.evaluate("window.__same_page") is True  # no reload happened
        page.screenshot(path=str(shots / "sandboxes.png"))
        page.select_option("select[name=state]", "paused")
        page.click("form.filters button")
        expect(page.locator("#sandbox-rows")).to_contain_text("No sandboxes match the filter")
    finally:
        _kill(console_env, box["sandboxID"])


def test_the_terminal_runs_echo_hi(console_env: ConsoleEnv, page: Page, shots: Path) -> None:
    box = console_env.sandbox()
    try:
        sign_in(page, console_env)
        page.goto(f"{console_env.server.url}/ui/sandboxes/{box['sandboxID']}")
        expect(page.locator("#terminal-status")).to_have_text("Connected.")
        expect(page.locator("#process-list")).to_contain_text("/bin/bash -i -l")
        # Nothing else had the keyboard, so the connected terminal took it.
        assert page.evaluate("document.getElementById('terminal').contains(document.activeElement)")
        page.locator("#terminal").click()
        page.keyboard.type("echo hi")
        page.keyboard.press("Enter")
        expect(page.locator(".xterm-rows > div", has_text=re.compile(r"^\s*hi\s*$"))).to_have_count(
            1
        )
        page.screenshot(path=str(shots / "sandbox.png"))
    finally:
        _kill(console_env, box["sandboxID"])


def test_the_terminal_never_takes_the_keyboard_from_a_field_being_typed_in(
    console_env: ConsoleEnv, page: Page
) -> None:
    """The terminal connects after the page is usable; keys typed into a form field meanwhile
    must stay in the field, never run as shell input. The terminal's script is held until the
    field has the keyboard, so the connection opens at the worst moment every time."""
    box = console_env.sandbox()
    held: list[Route] = []
    page.route("**/ui/static/terminal.js", lambda route: held.append(route))
    try:
        sign_in(page, console_env)
        with page.expect_request("**/ui/static/terminal.js"):
            page.goto(
                f"{console_env.server.url}/ui/sandboxes/{box['sandboxID']}", wait_until="commit"
            )
        field = page.locator("input[name=timeout_s]")
        field.fill("3000")
        deadline = time.monotonic() + 30
        while not held and time.monotonic() < deadline:
            page.evaluate("0")  # a round trip to the browser lets the route's handler run
        assert held, "the terminal's script was never requested"
        held[0].continue_()
        expect(page.locator("#terminal-status")).to_have_text("Connected.")
        page.keyboard.type("0")
        expect(field).to_have_value("30000")
        assert page.evaluate("document.activeElement.name") == "timeout_s"
    finally:
        _kill(console_env, box["sandboxID"])


def test_approving_a_pending_call_lets_the_waiting_script_go_on_and_audit_finds_it(
    console_env: ConsoleEnv, page: Page, shots: Path
) -> None:
    box = console_env.sandbox(metadata={"sandgate.agent": "approver"})
    sandbox_id = box["sandboxID"]
    try:
        sign_in(page, console_env)
        page.goto(f"{console_env.server.url}/ui/approvals")
        call = console_env.run_in_thread(box, f"kv set console:1 yes-{CANARY} && kv get console:1")
        card = page.locator("article.approval", has_text=sandbox_id)
        expect(card).to_be_visible()  # arrived live: the page was open before the call
        expect(card).to_contain_text("ask-before-writes")
        expect(card.locator("pre.args")).to_contain_text('"key": "console:1"')
        # The secret's value, passed as an argument, is shown redacted (never as is).
        expect(card.locator("pre.args")).to_contain_text("yes-[REDACTED:CONSOLE_CANARY]")
        assert CANARY not in page.content()
        page.screenshot(path=str(shots / "approvals.png"))
        card.locator("button.approve").click()
        expect(page.locator("#done")).to_contain_text("approved")
        call["thread"].join(120)
        result = call["result"]
        assert result.exit_code == 0 and "yes-" in result.stdout

        page.goto(f"{console_env.server.url}/ui/audit")
        expect(page.locator("#chain strong")).to_have_text("ok")
        page.fill("input[name=sandbox]", sandbox_id)
        page.fill("input[name=tool]", "kv")
        page.click("#audit-search button")
        rows = page.locator("#audit-rows tbody tr")
        expect(rows.filter(has_text="set")).to_have_count(1)
        expect(rows.filter(has_text="set")).to_contain_text("ask-before-writes")
        expect(rows.filter(has_text="get")).to_have_count(1)
        page.screenshot(path=str(shots / "audit.png"))
    finally:
        _kill(console_env, sandbox_id)


def test_a_read_only_key_sees_the_pages_and_its_action_is_refused(
    console_env: ConsoleEnv, page: Page
) -> None:
    box = console_env.sandbox()
    try:
        sign_in(page, console_env, console_env.read_key)
        expect(page.locator("#read-only")).to_be_visible()
        page.goto(f"{console_env.server.url}/ui/sandboxes/{box['sandboxID']}")
        expect(page.locator("#sandbox-state")).to_have_text("running")
        page.click("#kill")
        expect(page.locator("#error")).to_contain_text("read-only")
        with console_env.api() as api:
            assert api.get(f"/sandboxes/{box['sandboxID']}").json()["state"] == "running"
    finally:
        _kill(console_env, box["sandboxID"])


def test_a_form_without_its_csrf_token_is_refused(console_env: ConsoleEnv, page: Page) -> None:
    box = console_env.sandbox()
    try:
        sign_in(page, console_env)
        url = f"{console_env.server.url}/ui/sandboxes/{box['sandboxID']}/kill"
        response = page.request.post(url, form={}, max_redirects=0)
        assert response.status == 403 and "CSRF" in response.text()
        with console_env.api() as api:
            assert api.get(f"/sandboxes/{box['sandboxID']}").json()["state"] == "running"
    finally:
        _kill(console_env, box["sandboxID"])


def test_a_run_trace_shows_model_calls_code_and_the_answer(
    console_env: ConsoleEnv, page: Page, shots: Path
) -> None:
    console_env.models.script("console-model", code("print(6 * 7)"), text("The answer is 42."))
    with console_env.api() as api:
        started = api.post("/v1/agents/console-agent/runs", json={"message": "what is 6*7?"})
        assert started.status_code == 201, started.text
        run_id = started.json()["id"]
        with api.stream(
            "GET", f"/v1/runs/{run_id}/events", timeout=httpx.Timeout(10, read=300)
        ) as events:
            for line in events.iter_lines():
                if line in ("event: run.completed", "event: run.failed"):
                    break
    sign_in(page, console_env)
    page.goto(f"{console_env.server.url}/ui/runs")
    page.click(f"a[href='/ui/runs/{run_id}']")
    trace = page.locator("#trace")
    expect(trace.locator("li.card.code").first).to_contain_text("print(6 * 7)")
    expect(trace.locator("li.card.code").nth(1)).to_contain_text("42")
    model_call = trace.locator("li.card.model", has_text="model call").first
    expect(model_call).to_contain_text("prompt tokens")
    expect(trace.locator("li.card.model", has_text="model request").first).to_contain_text(
        "messages"
    )
    expect(page.locator("#answer")).to_have_text("The answer is 42.")
    page.screenshot(path=str(shots / "run.png"), full_page=True)
    page.goto(f"{console_env.server.url}/ui/runs")
    page.screenshot(path=str(shots / "runs.png"))
    page.goto(f"{console_env.server.url}/ui/templates")
    expect(page.locator("#templates")).to_contain_text("base")
    page.screenshot(path=str(shots / "templates.png"))


def test_pause_resume_timeout_and_kill_from_the_sandbox_page(
    console_env: ConsoleEnv, page: Page
) -> None:
    box = console_env.sandbox()
    sandbox_id = box["sandboxID"]
    try:
        sign_in(page, console_env)
        page.goto(f"{console_env.server.url}/ui/sandboxes/{sandbox_id}")
        page.click("#pause")
        expect(page.locator("#sandbox-state")).to_have_text("paused")
        with console_env.api() as api:
            assert api.get(f"/sandboxes/{sandbox_id}").json()["state"] == "paused"
        page.click("#resume")
        expect(page.locator("#sandbox-state")).to_have_text("running")
        page.fill("input[name=timeout_s]", "3000")
        page.click("#set-timeout")
        expect(page.locator("#sandbox-end")).to_contain_text("(in 49m)")
        page.click("#kill")
        expect(page).to_have_url(re.compile(r"/ui/sandboxes\?done=kill"))
        expect(page.locator(f"tr[data-sandbox='{sandbox_id}']")).to_have_count(0)
        with console_env.api() as api:
            assert api.get(f"/sandboxes/{sandbox_id}").status_code == 404
    finally:
        _kill(console_env, sandbox_id)


def test_a_workflow_run_is_drawn_as_its_dag_with_step_states(
    console_env: ConsoleEnv, page: Page, shots: Path
) -> None:
    def kv(op: str, **extra: str) -> dict[str, object]:
        return {"kind": "tool", "tool": "kv", "arguments": {"op": op, "key": "wf:a", **extra}}

    definition = {
        "steps": [
            {"id": "write", **kv("set", value="1")},
            {"id": "read_one", **kv("get"), "depends_on": ["write"]},
            {"id": "read_two", **kv("get"), "depends_on": ["write"]},
            {"id": "report", **kv("get"), "depends_on": ["read_one", "read_two"]},
        ]
    }
    with console_env.api() as api:
        assert api.put("/v1/workflows/console_dag", json=definition).status_code == 200
        started = api.post("/v1/workflows/console_dag/runs", json={"inputs": {}})
        assert started.status_code == 201, started.text
        run_id = started.json()["id"]
        with api.stream(
            "GET", f"/v1/workflow-runs/{run_id}/events", timeout=httpx.Timeout(10, read=300)
        ) as events:
            for _ in events.iter_lines():
                pass  # the stream ends when the run does
        assert api.get(f"/v1/workflow-runs/{run_id}").json()["state"] == "completed"
    sign_in(page, console_env)
    page.goto(f"{console_env.server.url}/ui/runs")
    page.click(f"a[href='/ui/workflows/{run_id}']")
    levels = page.locator("#dag .level")
    expect(levels).to_have_count(3)
    expect(levels.nth(0).locator(".step")).to_have_count(1)
    expect(levels.nth(1).locator(".step")).to_have_count(2)
    expect(levels.nth(2).locator("[data-step=report]")).to_contain_text("read_one, read_two")
    expect(page.locator("#dag .step .state", has_text="completed")).to_have_count(4)
    page.screenshot(path=str(shots / "workflow.png"))


def test_the_file_browser_lists_home_goes_in_and_up_downloads_and_uploads(
    console_env: ConsoleEnv, page: Page, shots: Path
) -> None:
    box = console_env.sandbox()
    sandbox_id = box["sandboxID"]
    try:
        made = run(
            console_env.server.url,
            sandbox_id,
            box["envdAccessToken"],
            "mkdir -p ~/project && printf 'hello from the sandbox' > ~/project/notes.txt && pwd",
        )
        assert made.exit_code == 0, made.stderr
        home = made.stdout.strip()
        sign_in(page, console_env)
        page.goto(f"{console_env.server.url}/ui/sandboxes/{sandbox_id}")
        expect(page.locator("#files-path")).to_have_text(home)
        page.locator("#file-list a.dir", has_text="project/").click()
        expect(page.locator("#files-path")).to_have_text(f"{home}/project")
        with page.expect_download() as downloading:
            page.locator("#file-list a.download", has_text="notes.txt").click()
        saved = downloading.value
        assert saved.suggested_filename == "notes.txt"
        assert Path(saved.path()).read_bytes() == b"hello from the sandbox"

        page.set_input_files(
            "#upload input[type=file]",
            files=[{"name": "up.txt", "mimeType": "text/plain", "buffer": b"from the browser"}],
        )
        page.click("#upload-button")
        expect(page.locator("#done")).to_contain_text(f"uploaded {home}/project/up.txt")
        expect(page.locator("#files-path")).to_have_text(f"{home}/project")
        expect(page.locator("#file-list tr[data-entry='up.txt']")).to_contain_text("16 B")
        page.locator("#files").screenshot(path=str(shots / "files.png"))
        check = run(
            console_env.server.url, sandbox_id, box["envdAccessToken"], "cat ~/project/up.txt"
        )
        assert check.stdout == "from the browser"

        page.click("#files-up")
        expect(page.locator("#files-path")).to_have_text(home)
        expect(page.locator("#file-list tr[data-entry='project']")).to_be_visible()

        # A path that names no directory gets a message on the page, not a 500.
        page.goto(f"{console_env.server.url}/ui/sandboxes/{sandbox_id}?path=/no/such/dir")
        expect(page.locator("#files-error")).to_contain_text("/no/such/dir")
        page.goto(f"{console_env.server.url}/ui/sandboxes/{sandbox_id}?path={home}/project/up.txt")
        expect(page.locator("#files-error")).to_contain_text("is a file, not a directory")
        missing = page.request.get(
            f"{console_env.server.url}/ui/sandboxes/{sandbox_id}/download?path=/no/such/file"
        )
        assert missing.status == 404 and "/no/such/file" in missing.text()
    finally:
        _kill(console_env, sandbox_id)


def test_cpu_and_memory_are_drawn_in_the_list_and_on_the_sandbox_page(
    console_env: ConsoleEnv, page: Page, shots: Path
) -> None:
    box = console_env.sandbox(metadata={"purpose": "console-metrics"})
    sandbox_id = box["sandboxID"]
    try:
        with console_env.api() as api:  # the same samples the E2B endpoint serves
            samples = api.get(f"/sandboxes/{sandbox_id}/metrics").json()
        assert samples and samples[-1]["memTotal"] > 0
        busy = run(
            console_env.server.url,
            sandbox_id,
            box["envdAccessToken"],
            "nohup timeout 120 sh -c 'while :; do :; done' >/dev/null 2>&1 &",
        )
        assert busy.exit_code == 0, busy.stderr
        sign_in(page, console_env)
        row = page.locator(f"tr[data-sandbox='{sandbox_id}']")
        expect(row.locator("svg.spark.cpu polyline")).to_have_count(1)
        # The list refreshes itself: the line grows as samples arrive (one a second here).
        expect(row.locator("svg.spark.cpu polyline")).to_have_attribute(
            "points", re.compile(r"^(\S+ ){3,}\S+$"), timeout=60_000
        )
        expect(row.locator("svg.spark.mem polyline")).to_have_count(1)
        expect(row.locator(".sparks")).to_contain_text("MiB")
        page.screenshot(path=str(shots / "sandboxes-metrics.png"))
        page.goto(f"{console_env.server.url}/ui/sandboxes/{sandbox_id}")
        for chart in ("#cpu-chart", "#memory-chart"):
            expect(page.locator(f"{chart} polyline.series")).to_have_count(1)
        expect(page.locator("#cpu-chart polyline.series")).to_have_attribute(
            "points",
            re.compile(r"^(\S+ ){5,}\S+$"),  # the page refreshes its charts every 5 s
            timeout=60_000,
        )
        expect(page.locator("#memory-chart figcaption")).to_contain_text("MiB")
        page.locator("#metrics").screenshot(path=str(shots / "metrics.png"))
    finally:
        _kill(console_env, sandbox_id)


def test_a_templates_builds_and_log_and_starting_a_sandbox_from_a_template(
    console_env: ConsoleEnv, page: Page, shots: Path
) -> None:
    mark = f"console-build-{secrets.token_hex(4)}"
    with console_env.api() as api:
        template_id, build_id = start_build(
            api,
            f"console-tpl-{secrets.token_hex(3)}",
            {"fromTemplate": "base", "steps": [{"type": "RUN", "args": [f"echo {mark}"]}]},
        )
        status = wait_build(api, template_id, build_id)
    assert status["status"] == "ready", status
    sign_in(page, console_env)
    page.goto(f"{console_env.server.url}/ui/templates")
    page.click(f"#templates tr[data-template='{template_id}'] a")
    row = page.locator(f"#builds tr[data-build='{build_id}']")
    expect(row.locator(".state")).to_have_text("ready")
    page.screenshot(path=str(shots / "template.png"))
    row.locator("a").click()
    expect(page.locator("#build-state")).to_have_text("ready")
    # The same lines the E2B build status endpoint serves.
    for line in status["logs"]:
        expect(page.locator("#build-log")).to_contain_text(line.split("] ", 1)[1])
    expect(page.locator("#build-log")).to_contain_text(mark)
    page.screenshot(path=str(shots / "build.png"), full_page=True)

    page.goto(f"{console_env.server.url}/ui/templates")
    page.locator("#templates tr", has_text="base").first.locator("button.start").click()
    expect(page).to_have_url(re.compile(r"/ui/sandboxes/[a-z0-9]+\?done=started"))
    expect(page.locator("#sandbox-state")).to_have_text("running")
    sandbox_id = page.url.split("/ui/sandboxes/")[1].split("?")[0]
    try:
        with console_env.api() as api:
            listed = api.get(f"/sandboxes/{sandbox_id}").json()
        assert listed["state"] == "running" and listed["alias"] == "base"
        expect(page.locator("#done")).to_contain_text("started from base")
    finally:
        _kill(console_env, sandbox_id)
