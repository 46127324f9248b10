"""API authentication and tenant isolation (security.md AUTH-01, AUTH-02, AUTH-04, MT-01)."""

from __future__ import annotations

import base64
from typing import Any

import httpx
import pytest

from tests.fixtures.server import RunningServer
from tests.framework.envd import envd_headers, run

pytestmark = pytest.mark.docker

CONTROL_ROUTES = [
    ("POST", "/sandboxes"),
    ("POST", "/v2/sandboxes"),
    ("GET", "/v2/sandboxes"),
    ("GET", "/sandboxes"),
    ("GET", "/sandboxes/abc"),
    ("DELETE", "/sandboxes/abc"),
    ("POST", "/sandboxes/abc/timeout"),
    ("POST", "/sandboxes/abc/connect"),
    ("POST", "/v2/sandboxes/abc/connect"),
    ("POST", "/sandboxes/abc/pause"),
    ("POST", "/sandboxes/abc/resume"),
    ("PUT", "/sandboxes/abc/network"),
    ("POST", "/sandboxes/abc/refreshes"),
    # teams and team metrics (api/e2b/teams.py)
    ("GET", "/teams"),
    ("GET", "/teams/abc/metrics"),
    ("GET", "/teams/abc/metrics/max"),
    # metrics and logs (api/e2b/metrics.py, api/e2b/logs.py)
    ("GET", "/sandboxes/metrics"),
    ("GET", "/sandboxes/abc/metrics"),
    ("GET", "/sandboxes/abc/logs"),
    ("GET", "/v2/sandboxes/abc/logs"),
]
#: Team secrets and volumes (issue 13): the same API key.
TEAM_ROUTES = [
    ("POST", "/secrets"),
    ("GET", "/secrets"),
    ("GET", "/secrets/abc"),
    ("POST", "/secrets/abc"),
    ("DELETE", "/secrets/abc"),
    ("POST", "/volumes"),
    ("GET", "/volumes"),
    ("GET", "/volumes/abc"),
    ("DELETE", "/volumes/abc"),
]
#: Team templates and their builds (issue 18): the same API key. Paths are the routers' own,
#: filled with ``_TEMPLATE_PARAMS`` for the requests.
TEMPLATE_ROUTES = [
    ("POST", "/v3/templates"),
    ("GET", "/templates/{template_id}/files/{files_hash}"),
    ("POST", "/v2/templates/{template_id}/builds/{build_id}"),
    ("GET", "/templates/{template_id}/builds/{build_id}/status"),
    ("GET", "/templates/{template_id}/builds/{build_id}/logs"),
    ("GET", "/templates/aliases/{alias}"),
    ("GET", "/templates"),
    ("GET", "/v2/templates"),
    ("GET", "/default-templates"),
    ("POST", "/templates/tags"),
    ("DELETE", "/templates/tags"),
    ("GET", "/templates/{template_id}/tags"),
    ("GET", "/templates/{template_id}/tags/count"),
    ("GET", "/templates/{template_id}/tags/exists"),
    ("GET", "/templates/{template_id}/tags/groups"),
    ("GET", "/templates/{template_id}/tags/{tag}/assignments"),
    ("GET", "/templates/{template_id}"),
    ("PATCH", "/templates/{template_id}"),
    ("PATCH", "/v2/templates/{template_id}"),
    ("POST", "/v2/templates"),
    ("POST", "/templates"),
    ("POST", "/templates/{template_id}"),
    ("POST", "/templates/{template_id}/builds/{build_id}"),
]
#: The registry of v1 builds (``docker push``): an API key as the Basic password.
REGISTRY_ROUTES = [
    ("GET", "/v2/"),
    ("HEAD", "/v2/e2b/custom-envs/abc/blobs/sha256:" + "0" * 64),
    ("GET", "/v2/e2b/custom-envs/abc/blobs/sha256:" + "0" * 64),
    ("POST", "/v2/e2b/custom-envs/abc/blobs/uploads/"),
    ("PATCH", "/v2/e2b/custom-envs/abc/blobs/uploads/" + "0" * 32),
    ("PUT", "/v2/e2b/custom-envs/abc/blobs/uploads/" + "0" * 32),
    ("PUT", "/v2/e2b/custom-envs/abc/manifests/abc"),
    ("GET", "/v2/e2b/custom-envs/abc/manifests/abc"),
    ("HEAD", "/v2/e2b/custom-envs/abc/manifests/abc"),
    ("GET", "/v2/e2b/other/repository/manifests/abc"),
]
#: Snapshots and forks, ``DELETE /templates/{ref}`` included (it deletes a snapshot, else the
#: team template of that name): their own AUTH-01 tests are in test_snapshots.py.
#: The build-context upload: its URL's signature is the credential (as E2B's presigned URL),
#: never an API key.
TEMPLATE_UPLOAD_ROUTE = ("PUT", "/templates/{template_id}/files/{files_hash}/upload")
_TEMPLATE_PARAMS = {
    "template_id": "base",
    "files_hash": "0" * 64,
    "build_id": "abc",
    "alias": "base",
    "tag": "default",
}
#: The volume file API: a volume token (``Authorization: Bearer``), never an API key.
VOLUME_CONTENT_ROUTES = [
    ("GET", "/volumecontent/abc/dir"),
    ("POST", "/volumecontent/abc/dir"),
    ("GET", "/volumecontent/abc/path"),
    ("PATCH", "/volumecontent/abc/path"),
    ("DELETE", "/volumecontent/abc/path"),
    ("GET", "/volumecontent/abc/file"),
    ("PUT", "/volumecontent/abc/file"),
]


@pytest.mark.parametrize(("method", "path"), CONTROL_ROUTES)
def test_AUTH_01_every_control_route_needs_a_key(
    sandgate_server: RunningServer, method: str, path: str
) -> None:
    response = httpx.request(method, sandgate_server.url + path, json={"templateID": "base"})
    assert response.status_code == 401
    assert response.json()["code"] == 401
    assert "E2B_API_KEY" in response.json()["message"]


def test_AUTH_01_the_route_list_is_complete(sandgate_server: RunningServer) -> None:
    """Fails when a control-plane route is added without being listed (and so tested) above."""
    from sandgate.api.e2b import build_control_router, build_logs_router, build_metrics_router
    from sandgate.api.e2b.secrets import build_secrets_router
    from sandgate.api.e2b.teams import build_teams_router
    from sandgate.api.e2b.volume_content import build_volume_content_app
    from sandgate.api.e2b.volumes import build_volumes_router
    from sandgate.config import SandboxLogsConfig

    routers = [
        build_control_router(None, None, "x"),  # type: ignore[arg-type]
        build_metrics_router(None, None),  # type: ignore[arg-type]
        build_logs_router(None, None, SandboxLogsConfig()),  # type: ignore[arg-type]
        build_teams_router(None),  # type: ignore[arg-type]
    ]
    declared = {
        (m, r.path)
        for router in routers
        for r in router.routes
        for m in r.methods  # type: ignore[attr-defined]
    }
    listed = {
        (
            m,
            p.replace("/sandboxes/abc", "/sandboxes/{sandbox_id}").replace(
                "/teams/abc", "/teams/{team_id}"
            ),
        )
        for m, p in CONTROL_ROUTES
    }
    assert declared == listed
    team = [build_secrets_router(None, None), build_volumes_router(None, None)]  # type: ignore[arg-type]
    declared = {(m, r.path) for t in team for r in t.routes for m in r.methods}  # type: ignore[attr-defined]
    ids = {"/secrets/abc": "/secrets/{secret_id}", "/volumes/abc": "/volumes/{volume_id}"}
    assert declared == {(m, ids.get(p, p)) for m, p in TEAM_ROUTES}
    content = build_volume_content_app(None)  # type: ignore[arg-type]
    declared = {(m, r.path) for r in content.routes for m in getattr(r, "methods", ())}
    listed = {(m, p.replace("abc", "{volume_id}")) for m, p in VOLUME_CONTENT_ROUTES}
    assert declared == listed
    from sandgate.api.e2b.templates import build_templates_router

    templates = build_templates_router(
        None,  # type: ignore[arg-type]
        disk_size_mb=1,
        default_cpu=1,
        default_memory=1,
        max_cpu=1,
        max_memory=1,
    )
    declared = {(m, r.path) for r in templates.routes for m in r.methods}  # type: ignore[attr-defined]
    assert declared == {*TEMPLATE_ROUTES, TEMPLATE_UPLOAD_ROUTE}


@pytest.mark.parametrize(("method", "path"), TEMPLATE_ROUTES)
def test_AUTH_01_every_template_route_needs_a_key(
    sandgate_server: RunningServer, method: str, path: str
) -> None:
    url = sandgate_server.url + path.format(**_TEMPLATE_PARAMS)
    body = {"name": "x", "target": "base", "tags": ["t"]}
    for headers in ({}, {"X-API-Key": "e2b_" + "0" * 40}):
        response = httpx.request(method, url, json=body, params={"tag": "t"}, headers=headers)
        assert response.status_code == 401, (path, response.text)
        assert "E2B_API_KEY" in response.json()["message"]


@pytest.mark.parametrize(("method", "path"), REGISTRY_ROUTES)
def test_AUTH_01_every_registry_route_needs_a_key_as_basic_password(
    sandgate_server: RunningServer, method: str, path: str
) -> None:
    url = sandgate_server.url + path
    wrong = base64.b64encode(b"_e2b_access_token:e2b_" + b"0" * 40).decode()
    for headers in ({}, {"Authorization": f"Basic {wrong}"}, {"Authorization": "Basic !!"}):
        response = httpx.request(method, url, content=b"{}", headers=headers)
        assert response.status_code == 401, (path, response.text)
        assert response.headers["www-authenticate"].startswith("Basic realm=")
        if method != "HEAD":
            assert response.json()["errors"][0]["code"] == "UNAUTHORIZED"
    # The API key in the X-API-Key header is not the registry's credential.
    keyed = httpx.request(method, url, headers={"X-API-Key": sandgate_server.api_key})
    assert keyed.status_code == 401, path


def test_AUTH_01_the_template_upload_needs_its_signature_not_a_key(
    sandgate_server: RunningServer,
) -> None:
    """A key does not open the upload route: only a signature the server issued does (the
    signature cases are in test_template_builds.py)."""
    url = sandgate_server.url + TEMPLATE_UPLOAD_ROUTE[1].format(**_TEMPLATE_PARAMS)
    for headers in ({}, {"X-API-Key": sandgate_server.api_key}):
        response = httpx.put(url, content=b"x", headers=headers)
        assert response.status_code == 403, response.text
        assert "upload URL" in response.json()["message"]


@pytest.mark.parametrize(("method", "path"), TEAM_ROUTES)
def test_AUTH_01_every_secret_and_volume_route_needs_a_key(
    sandgate_server: RunningServer, method: str, path: str
) -> None:
    response = httpx.request(method, sandgate_server.url + path, json={"name": "x", "value": "v"})
    assert response.status_code == 401
    assert "E2B_API_KEY" in response.json()["message"]


@pytest.mark.parametrize(("method", "path"), VOLUME_CONTENT_ROUTES)
def test_AUTH_01_every_volume_file_route_needs_the_volume_token(
    sandgate_server: RunningServer, method: str, path: str
) -> None:
    for headers in ({}, {"X-API-Key": sandgate_server.api_key}, {"Authorization": "Bearer x"}):
        response = httpx.request(
            method, sandgate_server.url + path, params={"path": "/"}, headers=headers
        )
        assert response.status_code == 401, (headers, response.text)
        assert response.json()["code"] == 401


@pytest.mark.parametrize(
    "mangle",
    [
        lambda k: "e2b_" + "0" * 40,
        lambda k: "not-a-key",
        lambda k: k[:-1] + ("0" if k[-1] != "0" else "1"),
        lambda k: k.upper(),
        lambda k: "Bearer " + k,
        lambda k: k + k,
    ],
)
def test_AUTH_02_bad_keys_get_one_identical_answer(
    sandgate_server: RunningServer, mangle: Any
) -> None:
    key = mangle(sandgate_server.api_key)
    response = httpx.get(f"{sandgate_server.url}/v2/sandboxes", headers={"X-API-Key": key})
    assert response.status_code == 401
    assert response.json() == {
        "code": 401,
        "message": "Invalid API key: check E2B_API_KEY (create one with `sandgate keys create`)",
        "error_code": "unauthenticated",
    }


def test_AUTH_02_an_access_token_bearer_is_an_api_key_and_nothing_more(
    sandgate_server: RunningServer,
) -> None:
    # E2B_ACCESS_TOKEN (the E2B CLI 1.x's credential) carries a Sandgate API key.
    url, key = sandgate_server.url, sandgate_server.api_key
    listed = httpx.get(f"{url}/v2/sandboxes", headers={"Authorization": f"Bearer {key}"})
    assert listed.status_code == 200, listed.text
    teams = httpx.get(f"{url}/teams", headers={"Authorization": f"bearer {key}"})
    assert teams.status_code == 200 and teams.json()[0]["apiKey"] == key
    refusals = (
        {"Authorization": f"Bearer {key}x"},
        {"Authorization": f"Basic {key}"},
        {"Authorization": key},
        # X-API-Key is the credential when both are sent, never a fallback to the other.
        {"X-API-Key": "not-a-key", "Authorization": f"Bearer {key}"},
    )
    for headers in refusals:
        refused = httpx.get(f"{url}/v2/sandboxes", headers=headers)
        assert refused.status_code == 401, headers
        assert refused.json()["error_code"] == "unauthenticated"


def test_AUTH_02_revoked_key_is_refused_at_once(sandgate_server: RunningServer) -> None:
    key = sandgate_server.create_key("short-lived")
    ok = httpx.get(f"{sandgate_server.url}/v2/sandboxes", headers={"X-API-Key": key["key"]})
    assert ok.status_code == 200
    sandgate_server.revoke_key(key["id"])
    refused = httpx.get(f"{sandgate_server.url}/v2/sandboxes", headers={"X-API-Key": key["key"]})
    assert refused.status_code == 401


def test_AUTH_04_sandbox_id_alone_grants_nothing(
    sandgate_server: RunningServer, sandbox: dict[str, Any]
) -> None:
    sandbox_id = sandbox["sandboxID"]
    assert len(sandbox_id) >= 25 and sandbox_id.isalnum()
    for token in (None, "wrong", sandbox["envdAccessToken"] + "x"):
        response = httpx.post(
            f"{sandgate_server.url}/process.Process/List",
            json={},
            headers={**envd_headers(sandbox_id, token), "content-type": "application/json"},
        )
        assert response.status_code == 401
        assert response.json()["code"] == 401
    files = httpx.get(
        f"{sandgate_server.url}/files",
        params={"path": "/etc/passwd"},
        headers=envd_headers(sandbox_id, None),
    )
    assert files.status_code == 401
    # /health is the one unauthenticated data-plane route (is_running needs it).
    health = httpx.get(f"{sandgate_server.url}/health", headers=envd_headers(sandbox_id, None))
    assert health.status_code == 204


def test_MT_01_teams_see_and_touch_only_their_own(
    sandgate_server: RunningServer, sandbox: dict[str, Any]
) -> None:
    other = sandgate_server.cli("keys", "create", "--team", "other-team", "--json")
    other_key = httpx.Response(200, text=other.stdout.strip().splitlines()[-1]).json()["key"]
    headers = {"X-API-Key": other_key}
    sandbox_id = sandbox["sandboxID"]
    url = sandgate_server.url
    assert httpx.get(f"{url}/sandboxes/{sandbox_id}", headers=headers).status_code == 404
    assert httpx.delete(f"{url}/sandboxes/{sandbox_id}", headers=headers).status_code == 404
    assert (
        httpx.post(
            f"{url}/sandboxes/{sandbox_id}/timeout", json={"timeout": 1}, headers=headers
        ).status_code
        == 404
    )
    assert (
        httpx.post(f"{url}/v2/sandboxes/{sandbox_id}/connect", json={}, headers=headers).status_code
        == 404
    )
    listed = httpx.get(f"{url}/v2/sandboxes", headers=headers).json()
    assert sandbox_id not in [s["sandboxID"] for s in listed]
    still = run(url, sandbox_id, sandbox["envdAccessToken"], "echo alive")
    assert still.stdout == "alive\n"


def test_malformed_and_oversized_bodies(sandgate_server: RunningServer) -> None:
    headers = {"X-API-Key": sandgate_server.api_key, "content-type": "application/json"}
    url = f"{sandgate_server.url}/v2/sandboxes"
    bad = httpx.post(url, content=b"{not json", headers=headers)
    assert bad.status_code == 400 and bad.json()["error_code"] == "invalid_json"
    assert bad.json()["message"].startswith("request body is not valid JSON")
    missing = httpx.post(url, json={"timeout": 5}, headers={"X-API-Key": sandgate_server.api_key})
    assert missing.status_code == 400 and "templateID" in missing.json()["message"]
    huge = httpx.post(url, content=b"{" + b" " * (2 * 1024 * 1024) + b"}", headers=headers)
    assert huge.status_code == 413 and huge.json()["code"] == 413

    def chunks():  # type: ignore[no-untyped-def]
        for _ in range(3):
            yield b" " * (1024 * 1024)

    chunked = httpx.post(url, content=chunks(), headers=headers)
    assert chunked.status_code == 413
    unknown = httpx.post(
        url, json={"templateID": "nope"}, headers={"X-API-Key": sandgate_server.api_key}
    )
    assert unknown.status_code == 404
    message = unknown.json()["message"]
    assert "template 'nope' not found" in message and "sandgate templates build" in message


def _upgrade(url: str, headers: dict[str, str]) -> httpx.Response:
    """A raw WebSocket upgrade request; the answer is the refusal (or 101)."""
    upgrade = {
        "Connection": "Upgrade",
        "Upgrade": "websocket",
        "Sec-WebSocket-Version": "13",
        "Sec-WebSocket-Key": "dGhlIHNhbXBsZSBub25jZQ==",
    }
    return httpx.get(url, headers={**upgrade, **headers})


@pytest.mark.parametrize("plane", ["envd", "control"])
def test_AUTH_05_cross_site_websocket_is_refused(
    sandgate_server: RunningServer, sandbox: dict[str, Any], plane: str
) -> None:
    """An upgrade from a hostile page (foreign Origin) to envd (PTY, processes) or the control
    plane is refused as cross-site, with the sandbox's own token and the key attached; without
    an Origin it still gets an honest 404 (nothing there speaks WebSocket), never a 500."""
    credentials = (
        envd_headers(sandbox["sandboxID"], sandbox["envdAccessToken"])
        if plane == "envd"
        else {"X-API-Key": sandgate_server.api_key}
    )
    path = "/process.Process/Start" if plane == "envd" else "/sandboxes"
    for origin in ("https://evil.test", "null"):
        refused = _upgrade(sandgate_server.url + path, {**credentials, "Origin": origin})
        assert refused.status_code == 403
        assert "cross-site WebSocket refused" in refused.json()["message"]
    plain = _upgrade(sandgate_server.url + path, credentials)
    assert plain.status_code == 404
    assert "serves no WebSocket" in plain.json()["message"]
