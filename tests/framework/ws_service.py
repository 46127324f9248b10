"""A WebSocket service inside a sandbox, for the tests and the benchmark of WebSocket routing.

Sandboxes are offline, so the ``websockets`` package the test venv holds is copied in (a
tarball through envd's ``/files``) and a small server built on it is started on
``WS_PORT``. Its paths:

* ``/echo``: every message back as it came (text as text, binary as binary);
* ``/headers``: one text message, the JSON of the upgrade request's headers, then echo;
* ``/ping``: pings the client, waits for the pong, then says ``"pong received"``;
* ``/close/<code>/<reason>``: closes at once with that code and reason;
* ``/last-close``: one text message, the close code and reason the previous ``/echo``
  connection ended with (``"<code> <reason>"``);
* ``/refuse``: refuses the upgrade with 403 and the body ``no entry``.

It accepts the subprotocol ``chat.v1`` when offered, and messages of any size.
"""

from __future__ import annotations

import io
import tarfile
from pathlib import Path

import httpx
import websockets

from tests.framework.sandbox_http import SandboxHttp, wait_for

WS_PORT = 9100

_SERVER = r"""
import asyncio, json, sys
sys.path.insert(0, "/home/user/wslib")
from websockets.asyncio.server import serve

last_close = ["none"]

def refuse(connection, request):
    if request.path == "/refuse":
        return connection.respond(403, "no entry")
    return None

async def handler(ws):
    path = ws.request.path.split("?")[0]
    if path.startswith("/close/"):
        _, _, code, reason = path.split("/", 3)
        await ws.close(int(code), reason)
        return
    if path == "/last-close":
        await ws.send(last_close[0])
        return
    if path == "/ping":
        await (await ws.ping(b"hello"))
        await ws.send("pong received")
    if path == "/headers":
        await ws.send(json.dumps({k.lower(): v for k, v in ws.request.headers.raw_items()}))
    try:
        async for message in ws:
            await ws.send(message)
    finally:
        if path == "/echo":
            rcvd = ws.protocol.close_rcvd
            last_close[0] = f"{rcvd.code} {rcvd.reason}" if rcvd else "no close frame"

async def main():
    async with serve(handler, "127.0.0.1", PORT, subprotocols=["chat.v1"],
                     select_subprotocol=lambda ws, offered: next(iter(offered), None),
                     process_request=refuse, max_size=None, ping_interval=None,
                     compression=None):
        await asyncio.Future()

asyncio.run(main())
"""


def server_source(port: int = WS_PORT) -> str:
    """The service's script, listening on ``127.0.0.1:port`` (the benchmark also runs it on
    the host, as the direct baseline)."""
    return _SERVER.replace("PORT", str(port))


def library_tarball() -> bytes:
    """The test venv's ``websockets`` package as a gzip tarball (``websockets/...``)."""
    return _library_tarball()


def _library_tarball() -> bytes:
    source = Path(websockets.__file__).parent
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
        tar.add(
            source,
            arcname="websockets",
            filter=lambda info: None if "__pycache__" in info.name else info,
        )
    return buffer.getvalue()


def start_ws_service(sandbox: SandboxHttp) -> None:
    """Copies ``websockets`` in, starts the service and waits until it accepts upgrades."""
    response = sandbox.put_file("/home/user/wslib.tgz", _library_tarball())
    assert response.status_code == 200, response.text
    sandbox.put_file("/home/user/ws_server.py", server_source().encode())
    sandbox.sh(
        "mkdir -p /home/user/wslib && tar xzf /home/user/wslib.tgz -C /home/user/wslib && "
        "(nohup python3 /home/user/ws_server.py >/home/user/ws.log 2>&1 &)"
    )
    url = sandbox.url
    headers = {**routing_headers(sandbox), "X-Access-Token": sandbox.token}

    def listening() -> bool:
        # A plain GET: the service answers 426 (upgrade required) once it listens.
        return httpx.get(f"{url}/echo", headers=headers).status_code == 426

    wait_for(listening, 30, "the WebSocket service inside the sandbox")


def routing_headers(sandbox: SandboxHttp, port: int = WS_PORT) -> dict[str, str]:
    return {"E2b-Sandbox-Id": sandbox.sandbox_id, "E2b-Sandbox-Port": str(port)}


def ws_url(base: str, path: str) -> str:
    return base.replace("http://", "ws://").replace("https://", "wss://") + path
