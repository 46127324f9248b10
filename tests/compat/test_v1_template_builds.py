"""E2B's v1 template builds (issue 13, "v1 template builds"): the E2B CLI 1.x flow of
``POST /templates``, ``docker login``/``docker push`` of ``e2b/custom-envs/<templateID>:
<buildID>`` to the server's registry, then ``POST /templates/{id}/builds/{buildID}``; and the
early v2 SDKs' ``POST /v2/templates``. Requests go through the floor SDK's generated client
(py e2b 2.31.0), pushes through the real docker CLI, sandboxes run on both runtimes.

The pushed image is built ``FROM sandgate/template-base:latest`` (no network in tests) with
one layer of its own; the sandbox proves that layer, its ``ENV`` and the start command are
there. Images these tests create (their local tags, the server's load tag of them) are
removed afterwards; nothing else is.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import secrets
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.fixtures.server import RunningServer
from tests.framework.envd import create, run
from tests.framework.template_api import api, new_team_api, start_build, wait_build

from .clients import PreparedClient, prepare, spec_named

pytestmark = [pytest.mark.compat, pytest.mark.docker]

BASE_IMAGE = "sandgate/template-base:latest"
DOCKERFILE = f"""FROM {BASE_IMAGE}
RUN echo pushed-layer-{{nonce}} > /pushed-marker
ENV PUSHED_ENV=from-the-image
"""


@pytest.fixture(scope="module")
def floor() -> PreparedClient:
    return prepare(spec_named("py-e2b-2.31.0"))


class Docker:
    """The docker CLI with a config directory of the test's own (logins stay there)."""

    def __init__(self, config: Path) -> None:
        self.env = {**os.environ, "DOCKER_CONFIG": str(config)}
        self.tags: list[str] = []

    def __call__(self, *args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            ["docker", *args],
            input=stdin,
            env=self.env,
            capture_output=True,
            text=True,
            timeout=600,
            check=False,
        )

    def build(self, context: Path, tag: str) -> None:
        nonce = secrets.token_hex(6)
        (context / "Dockerfile").write_text(DOCKERFILE.format(nonce=nonce))
        built = self("build", "-q", "-t", tag, str(context))
        assert built.returncode == 0, built.stderr
        self.tags.append(tag)

    def login(self, server: RunningServer, key: str) -> subprocess.CompletedProcess[str]:
        host = f"127.0.0.1:{server.port}"
        return self("login", host, "-u", "_e2b_access_token", "--password-stdin", stdin=key)

    def remove_own(self) -> None:
        for tag in self.tags:
            self("rmi", tag)


@pytest.fixture
def docker_cli(tmp_path: Path) -> Iterator[Docker]:
    cli = Docker(tmp_path / "docker-config")
    yield cli
    cli.remove_own()


def _floor(floor: PreparedClient, server: RunningServer, *args: str) -> dict[str, Any]:
    return floor.run("v1_templates", server.env, list(args))


def test_v1_build_from_a_pushed_image_runs_a_sandbox(
    runtime: str,
    runtime_server: RunningServer,
    floor: PreparedClient,
    docker_cli: Docker,
    tmp_path: Path,
) -> None:
    server = runtime_server
    alias = f"v1-pushed-{runtime}-{secrets.token_hex(3)}"
    requested = _floor(floor, server, "v1", alias, "echo started > /tmp/started", "true")
    assert requested["status"] == 202, requested
    assert requested["aliases"] == [alias]
    assert (requested["cpuCount"], requested["memoryMB"]) == (1, 512)
    template_id, build_id = requested["templateID"], requested["buildID"]

    ref = f"127.0.0.1:{server.port}/e2b/custom-envs/{template_id}:{build_id}"
    docker_cli.build(tmp_path, ref)
    docker_cli.tags.append(f"sandgate/pushed-{template_id}:{build_id}")  # the server's load
    logged_in = docker_cli.login(server, server.api_key)
    assert logged_in.returncode == 0, logged_in.stderr
    pushed = docker_cli("push", ref)
    assert pushed.returncode == 0, pushed.stdout + pushed.stderr

    started = _floor(floor, server, "start", template_id, build_id)
    assert started["status"] == 202, started
    client = api(server, server.api_key)
    status = wait_build(client, template_id, build_id)
    assert status["status"] == "ready", status
    messages = [entry["message"] for entry in status["logEntries"]]
    assert any(f"e2b/custom-envs/{template_id}:{build_id}" in m for m in messages), messages

    sandbox = create(server.url, server.api_key, templateID=alias, timeout=120)
    try:
        sid, token = sandbox["sandboxID"], sandbox["envdAccessToken"]
        probe = run(
            server.url, sid, token, "cat /pushed-marker; echo $PUSHED_ENV; whoami; cat /tmp/started"
        )
        assert probe.exit_code == 0, probe
        marker, env, user, started_mark = probe.stdout.split()
        assert marker.startswith("pushed-layer-")
        expected = (tmp_path / "Dockerfile").read_text().split("echo ")[1].split(" >")[0]
        assert marker == expected
        assert (env, user, started_mark) == ("from-the-image", "user", "started")
    finally:
        client.delete(f"/sandboxes/{sandbox['sandboxID']}")

    # The build is done: its tag takes no other image, and a rebuild gets a new build id.
    again = docker_cli("push", ref)
    assert again.returncode != 0 and "cannot change now" in again.stderr, again.stderr
    rebuilt = _floor(floor, server, "rebuild", template_id)
    assert rebuilt["status"] == 202, rebuilt
    assert rebuilt["templateID"] == template_id and rebuilt["buildID"] != build_id
    assert client.delete(f"/templates/{template_id}").status_code == 204
    assert not (server.home / "templates" / "registry" / template_id).exists()


def test_v2_templates_request_through_the_generated_client_builds(
    sandgate_server: RunningServer, floor: PreparedClient
) -> None:
    alias = f"v2-legacy-{secrets.token_hex(3)}"
    requested = _floor(floor, sandgate_server, "v2", alias)
    assert requested["status"] == 202, requested
    assert requested["aliases"] == [alias]
    template_id, build_id = requested["templateID"], requested["buildID"]
    client = api(sandgate_server, sandgate_server.api_key)
    started = client.post(
        f"/v2/templates/{template_id}/builds/{build_id}",
        json={"fromTemplate": "base", "steps": [{"type": "RUN", "args": ["echo v2 > /tmp/v2"]}]},
    )
    assert started.status_code == 202, started.text
    assert wait_build(client, template_id, build_id)["status"] == "ready"
    bad = _floor(floor, sandgate_server, "v2", "Not A Name")
    assert bad["status"] == 400 and "invalid template name" in bad["body"], bad
    assert client.delete(f"/templates/{template_id}").status_code == 204


def test_TPL_registry_refuses_other_teams_bad_digests_lists_and_unpushed_builds(
    sandgate_server: RunningServer, floor: PreparedClient, docker_cli: Docker, tmp_path: Path
) -> None:
    server = sandgate_server
    registry = server.url + "/v2"
    # The login probe asks for Basic credentials; a wrong key is refused.
    probe = httpx.get(registry + "/")
    assert probe.status_code == 401
    assert probe.headers["www-authenticate"].startswith("Basic realm=")
    assert probe.json()["errors"][0]["code"] == "UNAUTHORIZED"
    assert docker_cli.login(server, "e2b_" + "0" * 40).returncode != 0

    requested = _floor(floor, server, "v1", f"v1-refused-{secrets.token_hex(3)}", "", "")
    template_id, build_id = requested["templateID"], requested["buildID"]
    repo = f"{registry}/e2b/custom-envs/{template_id}"
    auth = {"Authorization": "Basic " + base64.b64encode(f"x:{server.api_key}".encode()).decode()}

    # Another team cannot push into this team's repository.
    _, other = new_team_api(server, "v1-other")
    other_key = str(other.headers["X-API-Key"])
    ref = f"127.0.0.1:{server.port}/e2b/custom-envs/{template_id}:{build_id}"
    docker_cli.build(tmp_path, ref)
    assert docker_cli.login(server, other_key).returncode == 0
    foreign = docker_cli("push", ref)
    assert foreign.returncode != 0 and "not found" in foreign.stderr, foreign.stderr
    other_auth = {"Authorization": "Basic " + base64.b64encode(f"x:{other_key}".encode()).decode()}
    assert httpx.post(repo + "/blobs/uploads/", headers=other_auth).status_code == 404

    # A blob whose bytes do not match its digest is refused and not stored.
    wrong = "sha256:" + hashlib.sha256(b"something else").hexdigest()
    sent = httpx.post(
        repo + "/blobs/uploads/", params={"digest": wrong}, content=b"x", headers=auth
    )
    assert sent.status_code == 400
    assert sent.json()["errors"][0]["code"] == "DIGEST_INVALID"
    assert httpx.head(f"{repo}/blobs/{wrong}", headers=auth).status_code == 404

    # A manifest list is refused with what to do instead.
    index = {
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.index.v1+json",
        "manifests": [],
    }
    listed = httpx.put(
        f"{repo}/manifests/{build_id}",
        content=json.dumps(index),
        headers={**auth, "Content-Type": "application/vnd.oci.image.index.v1+json"},
    )
    assert listed.status_code == 400
    assert listed.json()["errors"][0]["code"] == "MANIFEST_INVALID"
    assert "single-platform" in listed.json()["errors"][0]["message"]

    # Starting the build before the push fails it with the image to push.
    started = _floor(floor, server, "start", template_id, build_id)
    assert started["status"] == 202, started
    status = wait_build(api(server, server.api_key), template_id, build_id)
    assert status["status"] == "error"
    assert f"push e2b/custom-envs/{template_id}:{build_id} first" in status["reason"]["message"]
    # The v2 start of a v1 build is the v2 flow's; the v1 start of a v3 build is refused.
    client = api(server, server.api_key)
    v3_template, v3_build = start_build(
        client, f"v3-{secrets.token_hex(3)}", {"fromTemplate": "base", "steps": []}
    )
    refused = _floor(floor, server, "start", v3_template, v3_build)
    assert refused["status"] == 400 and "POST /v2/templates" in refused["body"], refused
    for tid in (template_id, v3_template):
        client.delete(f"/templates/{tid}")
