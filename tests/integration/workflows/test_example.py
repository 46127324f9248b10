"""``examples/workflows``: the daily report end to end, on a real server with its config:
records fetched through a tool, pandas in a code-interpreter-v1 sandbox, an approval, and the
report stored through a write; the audit log names every call's workflow, run and step."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.fixtures.server import RunningServer, ServerFactory
from tests.integration.workflows.conftest import WorkflowsEnv

EXAMPLE = Path(__file__).resolve().parents[3] / "examples" / "workflows" / "sandgate.yaml"


@pytest.fixture(scope="module")
def example(sandgate_server_factory: ServerFactory) -> Iterator[RunningServer]:
    server = sandgate_server_factory(
        config=EXAMPLE.read_text(), extra_env={"SANDGATE_RUNTIME": "bwrap"}
    )
    yield server
    server.stop()


def test_daily_report_example(example: RunningServer) -> None:
    wf = WorkflowsEnv(example, "sqlite", "bwrap")
    started = wf.start("daily_report", {"day": "2026-12-01"})
    run = wf.wait_for(started["id"], lambda r: wf.step(r, "review")["state"] == "waiting")
    analysed = wf.step(run, "analyse")["output"]
    report = analysed["result"]
    assert report["day"] == "2026-12-01" and report["sales"] == 40
    assert set(report["regions"]) <= {"north", "south", "east", "west"}
    assert round(sum(r["total"] for r in report["regions"].values()), 2) == pytest.approx(
        report["total"], abs=0.05
    )
    assert "amount" not in analysed["stderr"]  # pandas ran without complaint
    approval = wf.step(run, "review")["detail"]["approval"]
    pending = httpx.get(f"{example.url}/v1/approvals", headers=wf.headers()).json()
    shown = next(a for a in pending["approvals"] if a["id"] == approval)
    assert shown["arguments"]["details"] == {"sales": 40, "total": report["total"]}
    assert shown["subject"]["agent"] == "reporter"

    example.cli("approvals", "approve", approval)
    run = wf.finish(started["id"])

    assert run["state"] == "completed", run
    assert run["output"]["report"] == report
    assert run["output"]["approved_by"].startswith("cli:")
    calls = wf.audit(run["id"])
    assert [(c["tool"], c["action"], c["subject"]["workflow"]["step"]) for c in calls] == [
        ("records", None, "fetch"),
        ("kv", "set", "store"),
    ]
    assert all(c["outcome"] == "allowed" and c["subject"]["agent"] == "reporter" for c in calls)
