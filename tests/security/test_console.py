"""The web console's walls (docs/console.md, "Security"): every route needs a session; the
session cookie is HttpOnly, SameSite=Strict and holds no key; state-changing requests need
the session's CSRF token; a read-only key takes no action; another team's sandbox is a 404;
the terminal's WebSocket needs a session and this server's Origin (AUTH-05)."""

from __future__ import annotations

import json
import re
import secrets
from collections.abc import Callable, Iterator
from contextlib import closing
from dataclasses import dataclass
from typing import Any

import httpx
import pytest
from websockets.exceptions import InvalidStatus
from websockets.sync.client import connect

from tests.fixtures.server import RunningServer
from tests.framework.envd import create


@dataclass
class Console:
    server: RunningServer
    read_key: str
    other_key: str
    sandbox_id: str

    def session(self, key: str | None = None) -> tuple[httpx.Client, str]:
        """A signed-in client (cookie jar) and its CSRF token."""
        client = httpx.Client(base_url=self.server.url, timeout=60)
        response = client.post("/ui/login", data={"api_key": key or self.server.api_key})
        assert response.status_code == 303, response.text
        page = client.get("/ui/sandboxes")
        assert page.status_code == 200
        return client, _csrf(page.text)

    def alive(self) -> bool:
        response = httpx.get(
            f"{self.server.url}/sandboxes/{self.sandbox_id}",
            headers={"X-API-Key": self.server.api_key},
        )
        return response.status_code == 200 and response.json()["state"] == "running"

    def ws_url(self, sandbox_id: str | None = None) -> str:
        host = self.server.url.removeprefix("http://")
        return f"ws://{host}/ui/sandboxes/{sandbox_id or self.sandbox_id}/terminal"


def _csrf(html: str) -> str:
    match = re.search(r'name="csrf" value="([^"]+)"', html)
    assert match is not None, "the page has no CSRF field"
    return match.group(1)


def _key(server: RunningServer, *args: str) -> str:
    proc = server.cli("keys", "create", "--json", *args)
    return str(json.loads([x for x in proc.stdout.splitlines() if x.startswith("{")][-1])["key"])


@pytest.fixture(scope="module")
def console(runtime_server_factory: Callable[..., RunningServer]) -> Iterator[Console]:
    server = runtime_server_factory()
    box = create(server.url, server.api_key, timeout=600)
    yield Console(
        server=server,
        read_key=_key(server, "--name", "viewer", "--scope", "read"),
        other_key=_key(server, "--name", "intruder", "--team", "console-intruders"),
        sandbox_id=box["sandboxID"],
    )
    httpx.delete(
        f"{server.url}/sandboxes/{box['sandboxID']}", headers={"X-API-Key": server.api_key}
    )


def _console_routes() -> list[tuple[str, str]]:
    """(method, path) of every console route, read from the app itself."""
    from starlette.routing import Mount, Route, WebSocketRoute

    from sandgate.console import Console as App

    app = App(
        store=None,  # type: ignore[arg-type]
        sandboxes=None,  # type: ignore[arg-type]
        gateway=None,  # type: ignore[arg-type]
        agents=None,  # type: ignore[arg-type]
        workflows=None,  # type: ignore[arg-type]
        runtime="test",
        uploads=None,  # type: ignore[arg-type]
        templates=None,  # type: ignore[arg-type]
    )
    found = []
    for route in app.app.routes:
        if isinstance(route, Route):
            found += [(m, route.path) for m in sorted(route.methods or ()) if m != "HEAD"]
        elif isinstance(route, WebSocketRoute):
            found.append(("WS", route.path))
        elif isinstance(route, Mount):
            found.append(("MOUNT", route.path))
    return found


#: Routes anyone may reach: the sign-in page and form, and static files (no data).
_PUBLIC = {("GET", "/login"), ("POST", "/login"), ("GET", "/static/vendor/{name}")}


def test_AUTH_01_every_console_route_needs_a_session(console: Console) -> None:
    params = {
        "{sandbox_id}": console.sandbox_id,
        "{action}": "kill",
        "{approval_id}": "apr_0",
        "{decision}": "approve",
        "{run_id}": "run_0",
        "{template_id}": "base",
        "{build_id}": "build_0",
    }
    checked = 0
    for method, path in _console_routes():
        if (method, path) in _PUBLIC or method in ("WS", "MOUNT"):
            continue
        url = "/ui" + path
        for name, value in params.items():
            url = url.replace(name, value)
        response = httpx.request(method, console.server.url + url, follow_redirects=False)
        if method == "GET":
            assert response.status_code == 303, (method, path, response.status_code)
            assert response.headers["location"].startswith("/ui/login")
        else:
            assert response.status_code == 401, (method, path, response.status_code)
        checked += 1
    assert checked >= 15
    assert console.alive()


def test_console_cookie_is_http_only_strict_and_holds_no_key(console: Console) -> None:
    response = httpx.post(
        f"{console.server.url}/ui/login", data={"api_key": console.server.api_key}
    )
    assert response.status_code == 303
    cookie = response.headers["set-cookie"]
    attributes = {part.strip().split("=")[0].lower() for part in cookie.split(";")}
    assert {"httponly", "path", "samesite"} <= attributes
    assert "samesite=strict" in cookie.lower() and "path=/ui" in cookie.lower()
    value = cookie.split(";")[0].split("=", 1)[1]
    assert console.server.api_key not in cookie and len(value) >= 40
    # The session id is no credential anywhere but the console.
    api = httpx.get(f"{console.server.url}/v2/sandboxes", headers={"X-API-Key": value})
    assert api.status_code == 401


def test_AUTH_02_console_sign_in_with_a_wrong_key_sets_no_cookie(console: Console) -> None:
    for key in ("e2b_" + "0" * 40, console.server.api_key + " ", ""):
        response = httpx.post(f"{console.server.url}/ui/login", data={"api_key": key})
        assert response.status_code == 401 and "set-cookie" not in response.headers
        assert "Invalid API key" in response.text or "Missing API key" in response.text


def test_AUTH_02_revoking_a_key_ends_its_console_sessions(console: Console) -> None:
    proc = console.server.cli("keys", "create", "--json", "--name", "short-lived")
    created = json.loads([x for x in proc.stdout.splitlines() if x.startswith("{")][-1])
    client, _ = console.session(created["key"])
    with closing(client):
        console.server.revoke_key(created["id"])
        response = client.get("/ui/sandboxes")
        assert response.status_code == 303 and response.headers["location"].startswith("/ui/login")


def test_console_state_changes_need_the_sessions_csrf_token(console: Console) -> None:
    client, token = console.session()
    other, other_token = console.session()
    with closing(client), closing(other):
        kill = f"/ui/sandboxes/{console.sandbox_id}/kill"
        for form in ({}, {"csrf": ""}, {"csrf": "x" * len(token)}, {"csrf": other_token}):
            response = client.post(kill, data=form)
            assert response.status_code == 403 and "CSRF" in response.text, form
        assert client.post("/ui/logout", data={}).status_code == 403
        assert console.alive()
        # The token of this session works (a harmless action: set the same timeout).
        response = client.post(
            f"/ui/sandboxes/{console.sandbox_id}/timeout", data={"csrf": token, "timeout_s": "600"}
        )
        assert response.status_code == 303


def test_console_sign_in_from_another_site_is_refused(console: Console) -> None:
    response = httpx.post(
        f"{console.server.url}/ui/login",
        data={"api_key": console.server.api_key},
        headers={"Origin": "https://evil.test"},
    )
    assert response.status_code == 403 and "set-cookie" not in response.headers


def test_console_read_only_key_takes_no_action(console: Console) -> None:
    client, token = console.session(console.read_key)
    with closing(client):
        page = client.get(f"/ui/sandboxes/{console.sandbox_id}")
        assert page.status_code == 200 and "read-only" in page.text
        for action, extra in (("kill", {}), ("pause", {}), ("timeout", {"timeout_s": "5"})):
            response = client.post(
                f"/ui/sandboxes/{console.sandbox_id}/{action}", data={"csrf": token, **extra}
            )
            assert response.status_code == 403 and "read-only" in response.text, action
        response = client.post("/ui/approvals/apr_0/approve", data={"csrf": token})
        assert response.status_code == 403 and "read-only" in response.text
        with pytest.raises(InvalidStatus) as refused:
            connect(
                console.ws_url(),
                origin=console.server.url,  # type: ignore[arg-type]
                additional_headers={
                    "Cookie": f"sandgate_console={client.cookies['sandgate_console']}"
                },
                proxy=None,
            )
        assert refused.value.response.status_code == 403
    # The key is scoped: the API refuses it too.
    api = httpx.get(f"{console.server.url}/v2/sandboxes", headers={"X-API-Key": console.read_key})
    assert api.status_code == 403
    assert console.alive()


def test_MT_another_teams_sandbox_is_404_in_the_console(console: Console) -> None:
    client, token = console.session(console.other_key)
    with closing(client):
        assert console.sandbox_id not in client.get("/ui/sandboxes").text
        assert console.sandbox_id not in client.get("/ui/sandboxes/rows").text
        for path in ("", "/processes", "/metrics"):
            response = client.get(f"/ui/sandboxes/{console.sandbox_id}{path}")
            assert response.status_code == 404, path
        response = client.post(f"/ui/sandboxes/{console.sandbox_id}/kill", data={"csrf": token})
        assert response.status_code == 404
        with pytest.raises(InvalidStatus) as refused:
            connect(
                console.ws_url(),
                origin=console.server.url,  # type: ignore[arg-type]
                additional_headers={
                    "Cookie": f"sandgate_console={client.cookies['sandgate_console']}"
                },
                proxy=None,
            )
        assert refused.value.response.status_code == 403
    assert console.alive()


def _terminal(console: Console, cookie: str | None, origin: str | None) -> Any:
    headers = {"Cookie": f"sandgate_console={cookie}"} if cookie else {}
    return connect(
        console.ws_url(),
        origin=origin,  # type: ignore[arg-type]
        additional_headers=headers,
        proxy=None,
        open_timeout=30,
    )


def test_AUTH_05_console_terminal_needs_a_session_and_this_servers_origin(
    console: Console,
) -> None:
    client, _ = console.session()
    with closing(client):
        cookie = client.cookies["sandgate_console"]
        for session, origin in (
            (None, console.server.url),  # no session
            ("not-a-session", console.server.url),  # a made-up one
            (cookie, "https://evil.test"),  # cross-site hijack
            (cookie, None),  # no Origin: not a page of this console
        ):
            with pytest.raises(InvalidStatus) as refused:
                _terminal(console, session, origin)
            assert refused.value.response.status_code == 403, (session, origin)
        # The positive control: the same cookie from this origin gets a working shell.
        with _terminal(console, cookie, console.server.url) as ws:
            ws.send(json.dumps({"type": "input", "data": "echo console-$((6*7))\n"}))
            seen = b""
            while b"console-42" not in seen:
                frame = ws.recv(timeout=60)
                seen += frame if isinstance(frame, bytes) else frame.encode()


def _upload(
    client: httpx.Client, sandbox_id: str, token: str | None, name: str, data: bytes
) -> httpx.Response:
    query = {"dir": "/tmp"} | ({"csrf": token} if token is not None else {})
    return client.post(
        f"/ui/sandboxes/{sandbox_id}/upload", params=query, files={"file": (name, data)}
    )


def _download(client: httpx.Client, sandbox_id: str, path: str) -> httpx.Response:
    return client.get(f"/ui/sandboxes/{sandbox_id}/download", params={"path": path})


def test_console_upload_needs_the_csrf_token_and_a_full_key(console: Console) -> None:
    client, token = console.session()
    viewer, viewer_token = console.session(console.read_key)
    with closing(client), closing(viewer):
        for presented in (None, "", "x" * len(token), viewer_token):
            response = _upload(client, console.sandbox_id, presented, "csrf.txt", b"forged")
            assert response.status_code == 403 and "CSRF" in response.text, presented
        response = _upload(viewer, console.sandbox_id, viewer_token, "viewer.txt", b"read-only")
        assert response.status_code == 403 and "read-only" in response.text
        # Nothing was written; the viewer may still list and download (a read).
        for name in ("csrf.txt", "viewer.txt"):
            assert _download(client, console.sandbox_id, f"/tmp/{name}").status_code == 404
        assert viewer.get(f"/ui/sandboxes/{console.sandbox_id}/files?path=/tmp").status_code == 200
        # The positive control: the session's own token and a full key upload.
        response = _upload(client, console.sandbox_id, token, "ok.txt", b"uploaded")
        assert response.status_code == 303, response.text
        assert _download(viewer, console.sandbox_id, "/tmp/ok.txt").content == b"uploaded"
    assert console.alive()


def test_console_upload_is_bounded_by_the_upload_limit(console: Console) -> None:
    """A body declared larger than ``limits.max_upload_mib`` (the E2B ``/files`` limit) is
    refused before it is read; one within it may exceed the JSON body limit."""
    import http.client

    client, token = console.session()
    with closing(client):
        host = console.server.url.removeprefix("http://")
        conn = http.client.HTTPConnection(host, timeout=60)
        query = httpx.QueryParams({"csrf": token, "dir": "/tmp"})
        conn.putrequest("POST", f"/ui/sandboxes/{console.sandbox_id}/upload?{query}")
        conn.putheader("Cookie", f"sandgate_console={client.cookies['sandgate_console']}")
        conn.putheader("Content-Type", "multipart/form-data; boundary=b")
        conn.putheader("Content-Length", str(1 << 40))
        conn.endheaders(b"--b\r\n")
        response = conn.getresponse()
        body = response.read().decode()
        conn.close()
        assert response.status == 413 and "larger than the limit" in body
        assert response.getheader("connection") == "close"
        # Within the limit, a file larger than the control plane's JSON body limit passes.
        big = bytes(range(256)) * (3 * 4096)  # 3 MiB
        response = _upload(client, console.sandbox_id, token, "big.bin", big)
        assert response.status_code == 303, response.text
        assert _download(client, console.sandbox_id, "/tmp/big.bin").content == big
    assert console.alive()


def test_MT_another_teams_sandbox_files_are_404_in_the_console(console: Console) -> None:
    client, token = console.session(console.other_key)
    with closing(client):
        for path in ("/files", "/files?path=/etc", "/download?path=/etc/hostname"):
            response = client.get(f"/ui/sandboxes/{console.sandbox_id}{path}")
            assert response.status_code == 404, path
        response = _upload(client, console.sandbox_id, token, "intruder.txt", b"x")
        assert response.status_code == 404
    owner, _ = console.session()
    with closing(owner):
        assert _download(owner, console.sandbox_id, "/tmp/intruder.txt").status_code == 404
    assert console.alive()


def _sandbox_ids(console: Console) -> set[str]:
    listed = httpx.get(
        f"{console.server.url}/v2/sandboxes", headers={"X-API-Key": console.server.api_key}
    )
    assert listed.status_code == 200
    return {s["sandboxID"] for s in listed.json()}


def test_console_start_from_a_template_needs_the_csrf_token_and_a_full_key(
    console: Console,
) -> None:
    before = _sandbox_ids(console)
    client, token = console.session()
    viewer, viewer_token = console.session(console.read_key)
    with closing(client), closing(viewer):
        for form in ({}, {"csrf": ""}, {"csrf": viewer_token}):
            response = client.post("/ui/templates/base/start", data={**form, "timeout_s": "60"})
            assert response.status_code == 403 and "CSRF" in response.text, form
        response = viewer.post(
            "/ui/templates/base/start", data={"csrf": viewer_token, "timeout_s": "60"}
        )
        assert response.status_code == 403 and "read-only" in response.text
        assert viewer.get("/ui/templates/base").status_code == 200  # it may look
        # A bad timeout is a clear 400, and starts nothing either.
        response = client.post("/ui/templates/base/start", data={"csrf": token, "timeout_s": "x"})
        assert response.status_code == 400 and "whole number of seconds" in response.text
    assert _sandbox_ids(console) == before


def test_MT_another_teams_template_and_builds_are_404_in_the_console(console: Console) -> None:
    owner = httpx.Client(
        base_url=console.server.url, headers={"X-API-Key": console.server.api_key}, timeout=60
    )
    with closing(owner):
        created = owner.post("/v3/templates", json={"name": f"console-mt-{secrets.token_hex(3)}"})
        assert created.status_code == 202, created.text
        ids = created.json()
    template_id, build_id = ids["templateID"], ids["buildID"]
    mine, _ = console.session()
    with closing(mine):  # the positive control: the owning team sees it
        assert mine.get(f"/ui/templates/{template_id}").status_code == 200
        assert build_id in mine.get(f"/ui/templates/{template_id}").text
    before = _sandbox_ids(console)
    client, token = console.session(console.other_key)
    with closing(client):
        assert template_id not in client.get("/ui/templates").text
        for path in ("", f"/builds/{build_id}", f"/builds/{build_id}/log"):
            response = client.get(f"/ui/templates/{template_id}{path}")
            assert response.status_code == 404, path
        response = client.post(
            f"/ui/templates/{template_id}/start", data={"csrf": token, "timeout_s": "60"}
        )
        assert response.status_code == 404
    assert _sandbox_ids(console) == before
