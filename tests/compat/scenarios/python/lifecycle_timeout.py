"""Lifecycle at the timeout (issue 18), each deadline brought to now with ``set_timeout(1)``:

* ``lifecycle={"on_timeout": "pause", "auto_resume": True}``: the reaper pauses it (memory
  kept); a request without its token (``/health`` of envd) does not wake it; an HTTP request to
  its port 8000 with its traffic token does, answered by the server started before the pause;
* ``{"on_timeout": "kill"}``: the reaper kills it;
* ``{"on_timeout": {"action": "pause", "keep_memory": False}}``: paused to disk; ``connect``
  brings it back with its file.
"""

from __future__ import annotations

import os
import time
from typing import Any

import httpx
from _common import attempt, run
from _data import poll
from e2b import Sandbox

PORT = 8000
WAIT_S = 60


def _state(sandbox_id: str) -> str:
    info = Sandbox.get_info(sandbox_id)
    return str(getattr(info.state, "value", info.state))


def scenario(args: list[str]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    base = os.environ["E2B_SANDBOX_URL"].rstrip("/")
    made: list[str] = []
    try:
        woken = Sandbox.create(
            "base", timeout=300, lifecycle={"on_timeout": "pause", "auto_resume": True}
        )
        made.append(woken.sandbox_id)
        killed = Sandbox.create("base", timeout=300, lifecycle={"on_timeout": "kill"})
        made.append(killed.sandbox_id)
        stored = Sandbox.create(
            "base",
            timeout=300,
            lifecycle={"on_timeout": {"action": "pause", "keep_memory": False}},
        )
        made.append(stored.sandbox_id)

        woken.files.write("/home/user/www/hello.txt", "served after waking")
        woken.commands.run(
            f"python3 -m http.server {PORT}", background=True, cwd="/home/user/www", timeout=0
        )
        host = woken.get_host(PORT)
        auth = {"Host": host, "E2B-Traffic-Access-Token": woken.traffic_access_token or ""}
        with httpx.Client(base_url=base, timeout=30) as http:
            out["served_before"] = bool(
                poll(lambda: http.get("/hello.txt", headers=auth).status_code == 200, 20)
            )
            stored.files.write("/home/user/note.txt", "kept on disk")
            info = woken.get_info()
            out["lifecycle_info"] = {
                "on_timeout": info.lifecycle["on_timeout"] if info.lifecycle else None,
                "auto_resume": info.lifecycle["auto_resume"] if info.lifecycle else None,
            }
            for sbx in (woken, killed, stored):
                sbx.set_timeout(1)

            out["woken_paused"] = poll(lambda: _state(woken.sandbox_id) == "paused", WAIT_S)
            health = http.get("/health", headers={"Host": woken.get_host(49983)})
            out["woken_health_without_token"] = health.status_code
            out["woken_state_after_health"] = _state(woken.sandbox_id)
            started = time.monotonic()
            response = http.get("/hello.txt", headers=auth)
            out["woken_response"] = {"status": response.status_code, "body": response.text}
            out["woken_elapsed"] = time.monotonic() - started
            out["woken_state"] = _state(woken.sandbox_id)

        out["killed_gone"] = bool(
            poll(lambda: not attempt(lambda: Sandbox.get_info(killed.sandbox_id))["ok"], WAIT_S)
        )
        out["killed_info"] = attempt(lambda: _state(killed.sandbox_id))
        out["stored_paused"] = poll(lambda: _state(stored.sandbox_id) == "paused", WAIT_S)
        out["stored_is_running"] = stored.is_running()
        back = Sandbox.connect(stored.sandbox_id)
        out["stored_note"] = back.files.read("/home/user/note.txt")
        out["stored_state"] = _state(stored.sandbox_id)
    finally:
        out["cleanup"] = [attempt(lambda sid=sid: Sandbox.kill(sid)) for sid in made]
    return out


if __name__ == "__main__":
    run(scenario)
