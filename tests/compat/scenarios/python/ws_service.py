"""WebSockets to a sandbox service (issue 13), the SDK's part: upload a WebSocket echo service
(the ``websockets`` tarball and script the test hands over, as paths), start it in the
background, and report ``get_host(port)`` and the traffic token a client needs. The sandbox is
left running: the test connects to ``wss://<host>`` with its own WebSocket client, then kills
it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from _common import command_result, run
from _data import poll
from e2b import Sandbox

PORT = 9100
PROBE = f"python3 -c 'import socket; socket.create_connection((\"127.0.0.1\", {PORT}))'"


def scenario(args: list[str]) -> dict[str, Any]:
    tarball, script = Path(args[0]), Path(args[1])
    sbx = Sandbox.create("base", timeout=600)
    sbx.files.write("/home/user/wslib.tgz", tarball.read_bytes())
    sbx.files.write("/home/user/ws_server.py", script.read_text())
    out: dict[str, Any] = {
        "unpack": command_result(
            sbx.commands.run(
                "mkdir -p /home/user/wslib && tar xzf wslib.tgz -C wslib", cwd="/home/user"
            )
        )
    }
    sbx.commands.run("python3 /home/user/ws_server.py", background=True, timeout=0)
    out["listening"] = bool(poll(lambda: sbx.commands.run(PROBE).exit_code == 0, 30))
    out["sandbox_id"] = sbx.sandbox_id
    out["host"] = sbx.get_host(PORT)
    out["token"] = sbx.traffic_access_token
    return out


if __name__ == "__main__":
    run(scenario)
