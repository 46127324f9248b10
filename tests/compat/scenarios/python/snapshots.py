"""Snapshots and forks (issue 18): ``create_snapshot`` (unnamed and named), ``list_snapshots``,
``Sandbox.create(snapshot_id)``, ``fork(count=2)`` (the SDK's where it has one, else the raw
``POST /sandboxes/{id}/fork`` it would call, then ``connect``), ``delete_snapshot``.

A save holds the files (new, changed and deleted ones) and the creating call's envs; the
source's processes are not in it (a ``sleep`` started before is running in the source only).
Argument: a random tag, used as the snapshot's name.
"""

from __future__ import annotations

import os
from typing import Any

import httpx
from _common import attempt, command_result, describe_error, run
from e2b import Sandbox

# Runs inside the sandbox, in its own pid namespace: pgrep sees the sandbox's processes only.
PROBE = (
    "cat /home/user/note.txt; echo; test -e /etc/issue && echo issue || echo no-issue; "
    "echo $FOO; pgrep -x sleep >/dev/null && echo sleeping || echo no-sleep"
)


def _probe(sbx: Any) -> dict[str, Any]:
    return command_result(sbx.commands.run(PROBE))


def _fork(sbx: Any, count: int) -> dict[str, Any]:
    """The SDK's fork where it has one, else the request it would send."""
    if hasattr(sbx, "fork"):
        return {"via": "sdk", "forks": list(sbx.fork(count=count, timeout=120))}
    response = httpx.post(
        f"{os.environ['E2B_API_URL']}/sandboxes/{sbx.sandbox_id}/fork",
        json={"count": count, "timeout": 120},
        headers={"X-API-KEY": os.environ["E2B_API_KEY"]},
        timeout=120,
    )
    body = response.json()
    forks = [
        Sandbox.connect(entry["sandbox"]["sandboxID"]) if "sandbox" in entry else entry
        for entry in body
    ]
    return {"via": "http", "status": response.status_code, "forks": forks}


def scenario(args: list[str]) -> dict[str, Any]:
    tag = args[0]
    out: dict[str, Any] = {}
    made: list[str] = []
    source = Sandbox.create("base", envs={"FOO": "bar"}, timeout=300)
    made.append(source.sandbox_id)
    try:
        source.files.write("/home/user/note.txt", "before the snapshot")
        source.commands.run("sudo rm -f /etc/issue")
        source.commands.run("sleep 1000", background=True, timeout=0)

        unnamed = source.create_snapshot()
        named = source.create_snapshot(name=tag)
        out["unnamed"] = {"snapshot_id": unnamed.snapshot_id, "names": list(unnamed.names)}
        out["named"] = {"snapshot_id": named.snapshot_id, "names": list(named.names)}
        out["source_after"] = _probe(source)
        source.files.write("/home/user/note.txt", "after the snapshot")

        paginator = Sandbox.list_snapshots(sandbox_id=source.sandbox_id)
        listed: list[str] = []
        while paginator.has_next:
            listed.extend(item.snapshot_id for item in paginator.next_items())
        out["listed"] = listed

        restored = Sandbox.create(unnamed.snapshot_id, timeout=120)
        made.append(restored.sandbox_id)
        out["restored_id"] = restored.sandbox_id
        out["restored"] = _probe(restored)
        by_name = Sandbox.create(named.snapshot_id, timeout=120)
        made.append(by_name.sandbox_id)
        out["by_name"] = _probe(by_name)

        forked = _fork(source, 2)
        out["fork_via"] = forked["via"]
        out["fork_status"] = forked.get("status")
        out["forks"] = []
        for item in forked["forks"]:
            if isinstance(item, Sandbox):
                made.append(item.sandbox_id)
                out["forks"].append({"id": item.sandbox_id, "probe": _probe(item)})
            elif isinstance(item, Exception):
                out["forks"].append({"error": describe_error(item)})
            else:
                out["forks"].append({"error": item})

        out["delete"] = attempt(lambda: Sandbox.delete_snapshot(unnamed.snapshot_id))
        out["delete_again"] = attempt(lambda: Sandbox.delete_snapshot(unnamed.snapshot_id))
        out["create_deleted"] = attempt(lambda: Sandbox.create(unnamed.snapshot_id).sandbox_id)
        if out["create_deleted"]["ok"]:
            made.append(out["create_deleted"]["value"])
        out["delete_named"] = attempt(lambda: Sandbox.delete_snapshot(named.snapshot_id))
        paginator = Sandbox.list_snapshots(sandbox_id=source.sandbox_id)
        out["listed_after"] = [
            item.snapshot_id for item in (paginator.next_items() if paginator.has_next else [])
        ]
        out["restored_after_delete"] = _probe(restored)
    finally:
        out["cleanup"] = [attempt(lambda sid=sid: Sandbox.kill(sid)) for sid in made]
    return out


if __name__ == "__main__":
    run(scenario)
