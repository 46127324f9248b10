"""Ports and sandbox death (issue 3): a server inside the sandbox is reachable through Sandgate by
``Host: <port>-<id>.<domain>`` and by the routing headers, with the sandbox's
``traffic_access_token`` (ports are private by default; without it: 401); a sandbox created
with ``allow_public_traffic`` serves without one; a closed port answers E2B's 502 JSON;
the sandbox has no network interface but ``lo``. Then the sandbox is killed while a command
runs: the stream drops, ``is_running()`` is False, the SDK raises its timeout error, and a
neighbour sandbox keeps working."""

from __future__ import annotations

import os
from typing import Any

import httpx
from _common import attempt, command_result, describe_error, run
from _data import Waiter, poll
from e2b import Sandbox

PORT = 8000
CLOSED_PORT = 8001


def _response(r: httpx.Response) -> dict[str, Any]:
    try:
        body: Any = r.json()
    except ValueError:
        body = r.text
    return {"status": r.status_code, "body": body}


def scenario(args: list[str]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    base = os.environ["E2B_SANDBOX_URL"].rstrip("/")
    sbx = Sandbox.create("base")
    neighbour = Sandbox.create("base", network={"allow_public_traffic": True})
    try:
        sbx.files.write("/home/user/www/hello.txt", "served from inside")
        server = sbx.commands.run(
            f"python3 -m http.server {PORT}", background=True, cwd="/home/user/www", timeout=0
        )
        host = sbx.get_host(PORT)
        out["host"] = host
        out["sandbox_id"] = sbx.sandbox_id
        token = sbx.traffic_access_token or ""
        out["traffic_token_set"] = bool(token)
        out["public_traffic_token"] = neighbour.traffic_access_token
        auth = {"E2B-Traffic-Access-Token": token}
        with httpx.Client(base_url=base, timeout=10) as http:
            by_host = poll(
                lambda: (
                    (r := http.get("/hello.txt", headers={"Host": host, **auth})).status_code == 200
                    and r
                ),
                20,
            )
            out["by_host"] = _response(by_host) if by_host else None
            routed = http.get(
                "/hello.txt",
                headers={
                    "E2b-Sandbox-Id": sbx.sandbox_id,
                    "E2b-Sandbox-Port": str(PORT),
                    **auth,
                },
            )
            out["by_headers"] = _response(routed)
            out["without_token"] = _response(http.get("/hello.txt", headers={"Host": host}))
            closed = http.get("/", headers={"Host": sbx.get_host(CLOSED_PORT), **auth})
            out["closed_port"] = _response(closed)
            neighbour.files.write("/home/user/www/hello.txt", "public")
            public = neighbour.commands.run(
                f"python3 -m http.server {PORT}", background=True, cwd="/home/user/www", timeout=0
            )
            open_port = poll(
                lambda: (
                    (
                        r := http.get("/hello.txt", headers={"Host": neighbour.get_host(PORT)})
                    ).status_code
                    == 200
                    and r
                ),
                20,
            )
            out["public_port"] = _response(open_port) if open_port else None
            public.kill()
        server.disconnect()
        interfaces = "tail -n +3 /proc/net/dev | cut -d: -f1 | tr -d ' '"
        out["interfaces"] = command_result(sbx.commands.run(interfaces))

        # --- the sandbox is killed while a command runs
        running = sbx.commands.run("sleep 120", background=True, timeout=0)
        waiter = Waiter(running)
        out["killed"] = Sandbox.kill(sbx.sandbox_id)
        out["stream_after_kill"] = waiter.join(60)
        out["is_running_after_kill"] = sbx.is_running()
        out["run_after_kill"] = attempt(lambda: sbx.commands.run("echo late"))
        out["neighbour"] = command_result(neighbour.commands.run("echo ok"))
        out["neighbour_running"] = neighbour.is_running()
    except Exception as exc:
        out["scenario_error"] = describe_error(exc)
    finally:
        attempt(sbx.kill)
        out["cleanup"] = attempt(neighbour.kill)
    return out


if __name__ == "__main__":
    run(scenario)
