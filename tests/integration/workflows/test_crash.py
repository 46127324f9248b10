"""``kill -9`` of the server in the middle of a step, then a restart: completed steps are not
run again (counted in the audit log), an idempotent step is run again, a non-idempotent one
is not: the run stops as interrupted until someone retries it (issue 15, "Done when")."""

from __future__ import annotations

import json
from pathlib import Path

from tests.integration.workflows.conftest import WorkflowsEnv


def test_kill_9_during_an_idempotent_step_resumes_without_repeating(wf: WorkflowsEnv) -> None:
    started = wf.start("resume")
    before = wf.wait_for(started["id"], lambda r: wf.step(r, "slow")["state"] == "running")
    first_output = wf.step(before, "first")["output"]
    assert len(wf.calls_of(started["id"], "first")) == 1

    wf.server.kill()  # SIGKILL while `slow` (6 s) runs: no chance to clean up
    wf.server.start()

    run = wf.finish(started["id"])
    assert run["state"] == "completed", run
    # `first` completed before the crash: its checkpoint is replayed, the tool not called.
    assert len(wf.calls_of(run["id"], "first")) == 1
    assert wf.step(run, "first")["output"] == first_output
    # `slow` was cut off before it finished (no audit record); being idempotent, it ran again.
    assert len(wf.calls_of(run["id"], "slow")) == 1
    assert len(wf.calls_of(run["id"], "last")) == 1
    assert run["attempt"] == 1


def test_kill_9_during_a_write_stops_the_run_until_retried(
    wf: WorkflowsEnv, tmp_path: Path
) -> None:
    mark = tmp_path / "transfer-began"
    started = wf.start("pay", {"mark": str(mark)})
    # "running" is shown once the step is launched, a moment before it begins to act; a crash
    # in that moment rightly runs it again (it did nothing). Kill only once it has acted.
    wf.wait_for(started["id"], lambda r: mark.exists())

    wf.server.kill()
    wf.server.start()

    run = wf.wait_for(started["id"], lambda r: r["state"] not in ("queued", "running"))
    assert run["state"] == "interrupted", run
    assert run["failed_step"] == "transfer" and run["error_code"] == "step_interrupted"
    assert "not idempotent" in run["error"] and "workflows retry" in run["error"]
    assert wf.step(run, "transfer")["state"] == "interrupted"
    assert wf.calls_of(run["id"], "transfer") == []  # it never finished, and never re-ran
    assert wf.calls_of(run["id"], "last") == []

    # A person checked: retry continues from the interrupted step; `first` is kept.
    retried = wf.server.cli("workflows", "retry", run["id"]).stdout
    assert "attempt 2" in retried
    run = wf.finish(run["id"])
    assert run["state"] == "completed", run
    assert run["attempt"] == 2
    assert len(wf.calls_of(run["id"], "first")) == 1
    assert len(wf.calls_of(run["id"], "transfer")) == 1
    assert len(wf.calls_of(run["id"], "last")) == 1
    shown = wf.server.cli("workflows", "show", run["id"]).stdout
    assert "completed" in shown and "transfer" in shown and "first" in shown


def test_an_approval_waits_across_a_kill_9(wf: WorkflowsEnv) -> None:
    started = wf.start("approve", {"amount": 7})
    run = wf.wait_for(started["id"], lambda r: wf.step(r, "ask")["state"] == "waiting")
    approval = wf.step(run, "ask")["detail"]["approval"]
    listed = [
        json.loads(line)
        for line in wf.server.cli("approvals", "list", "--json").stdout.splitlines()
    ]
    expires = next(a["expires_at"] for a in listed if a["id"] == approval)

    wf.server.kill()
    wf.server.start()

    # The same approval is still the one the run waits for (not asked again), with the same
    # deadline (the clock did not restart).
    pending = [
        json.loads(line)
        for line in wf.server.cli("approvals", "list", "--json").stdout.splitlines()
    ]
    mine = [a for a in pending if a["subject"].get("workflow", {}).get("run") == started["id"]]
    assert [(a["id"], a["expires_at"]) for a in mine] == [(approval, expires)]
    wf.server.cli("approvals", "approve", approval)

    run = wf.finish(started["id"])
    assert run["state"] == "completed", run
    assert len(wf.calls_of(run["id"], "quote")) == 1  # done before the crash: not repeated
    assert len(wf.calls_of(run["id"], "pay")) == 1
