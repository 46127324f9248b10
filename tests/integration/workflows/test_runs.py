"""Workflows on a real server with real sandboxes, on SQLite and PostgreSQL, on both runtimes:
parallel branches, fan-out, approvals, crash and resume, failures (issue 15, "Done when")."""

from __future__ import annotations

import httpx

from tests.integration.workflows.conftest import WorkflowsEnv


def test_diamond_branches_run_in_parallel_sandboxes(wf: WorkflowsEnv) -> None:
    run = wf.run("diamond")

    assert run["state"] == "completed", run
    left, right = run["output"]["left"], run["output"]["right"]
    # Each branch slept 2 s in its own sandbox: they overlapped (the later start came before
    # the earlier end), so the whole run took far less than the 4 s of running them in turn.
    assert max(left["start"], right["start"]) < min(left["end"], right["end"])
    assert run["output"]["joined"] == "left+right"
    # The branches' tool calls went through the gateway from their sandboxes, and the audit
    # log names the workflow, run and step of each.
    calls = wf.audit(run["id"])
    assert sorted(c["subject"]["workflow"]["step"] for c in calls) == [
        "fetch",
        "join",
        "left",
        "right",
    ]
    by_step = {c["subject"]["workflow"]["step"]: c for c in calls}
    assert by_step["left"]["tool"] == "kv" and by_step["left"]["outcome"] == "allowed"
    assert by_step["left"]["sandbox"] == wf.step(run, "left")["detail"]["sandbox"]
    assert by_step["fetch"]["sandbox"] == run["id"]
    assert all(c["subject"]["workflow"]["name"] == "diamond" for c in calls)
    assert run["usage"]["tool_calls"] == 4


def test_fan_out_of_twenty_with_a_concurrency_cap(wf: WorkflowsEnv) -> None:
    run = wf.run("fanout", {"n": 20})

    assert run["state"] == "completed", run
    assert [o["tag"] for o in run["output"]] == [f"item-{i}" for i in range(20)]
    each = wf.step(run, "each")
    assert each["items"] == {"total": 20, "done": 20}
    assert len(wf.calls_of(run["id"], "each[0]")) == 1
    assert len([c for c in wf.audit(run["id"]) if c["tool"] == "stamp"]) == 20
    # concurrency: 5 → never more than five elements running at once, but more than one.
    spans = sorted((o["start"], o["end"]) for o in run["output"])
    most = max(sum(1 for s, e in spans if s <= start < e) for start, _ in spans)
    assert 1 < most <= 5


def test_approval_approved_from_the_cli(wf: WorkflowsEnv) -> None:
    started = wf.start("approve", {"amount": 42})
    run = wf.wait_for(started["id"], lambda r: wf.step(r, "ask")["state"] == "waiting")
    approval_id = wf.step(run, "ask")["detail"]["approval"]

    # The approval is one like any other: listed by the CLI and the HTTP API...
    listed = wf.server.cli("approvals", "list", "--json").stdout
    assert approval_id in listed and "Pay 42?" in listed
    api = httpx.get(
        f"{wf.server.url}/v1/approvals", params={"state": "pending"}, headers=wf.headers()
    ).json()["approvals"]
    mine = next(a for a in api if a["id"] == approval_id)
    assert mine["tool"] == "workflow:approve" and mine["action"] == "ask"
    assert mine["arguments"]["details"] == {"quote": "quote-42"}
    # ...and decided from another process (the CLI writes the decision; the run picks it up).
    wf.server.cli("approvals", "approve", approval_id)

    run = wf.finish(started["id"])
    assert run["state"] == "completed", run
    assert wf.step(run, "ask")["output"]["approved"] is True
    assert wf.step(run, "pay")["output"] == {"charged": "quote-42"}
    assert len(wf.calls_of(run["id"], "pay")) == 1


def test_approval_denied_through_the_api_stops_the_run(wf: WorkflowsEnv) -> None:
    started = wf.start("approve", {"amount": 1000})
    run = wf.wait_for(started["id"], lambda r: wf.step(r, "ask")["state"] == "waiting")
    approval_id = wf.step(run, "ask")["detail"]["approval"]

    response = httpx.post(f"{wf.server.url}/v1/approvals/{approval_id}/deny", headers=wf.headers())
    assert response.status_code == 200, response.text

    run = wf.finish(started["id"])
    assert run["state"] == "failed"
    assert run["failed_step"] == "ask" and run["error_code"] == "approval_denied"
    assert wf.step(run, "pay")["state"] == "pending"
    assert wf.calls_of(run["id"], "pay") == []


def test_approval_nobody_answers_denies(wf: WorkflowsEnv) -> None:
    run = wf.run("approve_quickly")

    assert run["state"] == "failed"
    assert run["error_code"] == "approval_denied"
    assert "nobody answered in time" in run["error"]
    ask = wf.step(run, "ask")
    assert ask["output"]["state"] == "expired"
    assert wf.calls_of(run["id"], "pay") == []


def test_failing_write_is_not_retried_and_a_failing_read_is(wf: WorkflowsEnv) -> None:
    write = wf.run("failing_write")

    assert write["state"] == "failed"
    assert write["failed_step"] == "write" and write["error_code"] == "tool_failed"
    assert "the payment service said no" in write["error"]
    assert len(wf.calls_of(write["id"], "write")) == 1  # a write runs at most once
    assert wf.calls_of(write["id"], "after") == []

    read = wf.run("failing")
    assert read["state"] == "failed"
    assert len(wf.calls_of(read["id"], "read")) == 3  # retries: 2 → three attempts


def test_when_skips_and_a_child_workflow_runs(wf: WorkflowsEnv) -> None:
    run = wf.run("branching", {"big": False})

    assert run["state"] == "completed", run
    assert wf.step(run, "big")["state"] == "skipped"
    assert wf.step(run, "small")["state"] == "completed"
    assert run["output"]["big"] is None and run["output"]["small"]["tag"] == "small"
    assert run["output"]["child"] == "child-size"
    child_id = wf.step(run, "child")["detail"]["child_run"]
    child = wf.get(child_id)
    assert child["parent_run"] == run["id"] and child["trigger"] == "workflow"
    assert len(wf.calls_of(child_id, "echo")) == 1


def test_sse_events_per_step_and_resume_from_last_event_id(wf: WorkflowsEnv) -> None:
    started = wf.start("branching", {"big": True})
    events = wf.events(started["id"])

    kinds = [(e["type"], e["data"].get("step")) for e in events]
    assert kinds[0] == ("run.queued", None)
    assert kinds[-1] == ("run.completed", None)
    for step in ("size", "big", "child"):
        assert ("step.running", step) in kinds and ("step.completed", step) in kinds
    assert ("step.skipped", "small") in kinds
    assert [e["id"] for e in events] == sorted(e["id"] for e in events)
    later = wf.events(started["id"], last_event_id=events[2]["id"])
    assert [e["id"] for e in later] == [e["id"] for e in events[3:]]


def test_run_timeout(wf: WorkflowsEnv) -> None:
    run = wf.run("slow_run")

    assert run["state"] == "timed_out"
    assert run["error_code"] == "run_timed_out"
    assert wf.step(run, "wait")["state"] == "cancelled"


def test_tool_call_budget_stops_the_run_before_the_next_step(wf: WorkflowsEnv) -> None:
    run = wf.run("budget_steps")

    assert run["state"] == "failed"
    assert run["error_code"] == "budget_exceeded"
    assert run["failed_step"] == "three"
    assert "budgets.max_tool_calls 2" in run["error"]
    assert wf.step(run, "two")["state"] == "completed"
    three = wf.step(run, "three")
    assert three["state"] == "cancelled" and three["error_code"] == "budget_exceeded"
    assert wf.calls_of(run["id"], "three") == []
    assert run["usage"]["tool_calls"] == 2


def test_a_code_step_cannot_spend_past_the_tool_call_budget(wf: WorkflowsEnv) -> None:
    run = wf.run("budget_code")

    # budgets.max_tool_calls: 3, one spent by `fetch`: the script's third call is refused by
    # the gateway as it is made, and the step fails although the script caught the error.
    assert run["state"] == "failed"
    assert run["failed_step"] == "spend" and run["error_code"] == "budget_exceeded"
    assert "budgets.max_tool_calls" in run["error"]
    spend = wf.step(run, "spend")
    assert spend["state"] == "failed" and spend["error_code"] == "budget_exceeded"
    calls = wf.calls_of(run["id"], "spend")
    assert [c["outcome"] for c in calls[:2]] == ["allowed", "allowed"]
    assert len([c for c in calls if c["outcome"] == "allowed"]) == 2
    assert all(c["outcome"] != "allowed" for c in calls[2:]) and len(calls) >= 3
    assert calls[2]["rule"] == "run-budget"
    assert wf.step(run, "after")["state"] == "pending"
    assert wf.calls_of(run["id"], "after") == []


def test_a_code_step_past_its_timeout_fails_the_run(wf: WorkflowsEnv) -> None:
    run = wf.run("slow_step")

    assert run["state"] == "failed"
    assert run["failed_step"] == "nap" and run["error_code"] == "step_timeout"
    assert "step nap did not finish within 3s" in run["error"]
    nap = wf.step(run, "nap")
    assert nap["state"] == "failed" and nap["error_code"] == "step_timeout"
    assert wf.step(run, "after")["state"] == "pending"
    assert wf.calls_of(run["id"], "after") == []
