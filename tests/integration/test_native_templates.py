"""Templates without a container engine: ``sandgate templates build --engine native`` and a
server on a host where no Docker engine answers (``DOCKER_HOST`` points nowhere), which must
pick bwrap, register the engine-less ``base`` and run sandboxes from it.

``scripts/test`` builds the native ``base`` into ``$SANDGATE_TEST_NATIVE_ROOTFS`` before the
suite (a debootstrap from Debian's mirror, reused while current), so the tests themselves
touch no network.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import secrets
import shutil
import subprocess
import tarfile
from pathlib import Path

import httpx
import pytest

from tests.fixtures.server import ServerFactory
from tests.framework.envd import create, run
from tests.framework.template_api import new_team_api, start_build, wait_build

_NO_DOCKER = {"DOCKER_HOST": "unix:///nonexistent/docker.sock"}


@pytest.fixture(scope="module")
def native_rootfs() -> Path:
    path = Path(os.environ.get("SANDGATE_TEST_NATIVE_ROOTFS", "/var/tmp/sandgate-test-native"))
    if not any(path.glob("by-name/sandgate_template-base_*.json")):
        pytest.fail(
            f"no engine-less base template in {path}: run scripts/test, or "
            f"SANDGATE_RUNTIME__ROOTFS_DIR={path} sandgate templates build base "
            "--engine native"
        )
    return path


def test_cli_lists_the_native_template_as_current(native_rootfs: Path) -> None:
    result = subprocess.run(
        ["sandgate", "templates", "list", "--engine", "native"],
        env={
            **os.environ,
            **_NO_DOCKER,
            "SANDGATE_RUNTIME__ROOTFS_DIR": str(native_rootfs),
            "COLUMNS": "200",
        },
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    line = next(x for x in result.stdout.splitlines() if "│ base " in x)
    assert "current" in line and "sandgate/template-base:" in line


def test_serve_without_any_container_engine_runs_bwrap_sandboxes(
    native_rootfs: Path, sandgate_server_factory: ServerFactory
) -> None:
    server = sandgate_server_factory(
        extra_env={
            **_NO_DOCKER,
            "SANDGATE_RUNTIME": "auto",
            "SANDGATE_RUNTIME__ROOTFS_DIR": str(native_rootfs),
        },
    )
    health = httpx.get(f"{server.url}/health", timeout=10)
    assert health.status_code == 200
    sandbox = create(server.url, server.api_key, timeout=120)
    try:
        result = run(
            server.url,
            sandbox["sandboxID"],
            sandbox["envdAccessToken"],
            ". /etc/os-release; echo $VERSION_CODENAME $(id -un) $(pwd)",
        )
        assert result.exit_code == 0, result.stderr
        assert result.stdout.split() == ["bookworm", "user", "/home/user"]
        info = httpx.get(
            f"{server.url}/sandboxes/{sandbox['sandboxID']}",
            headers={"X-API-Key": server.api_key},
            timeout=10,
        ).json()
        assert info["templateID"] and info["alias"] == "base"
        assert "runtime=bwrap" in server.log_text() or '"runtime": "bwrap"' in server.log_text()
    finally:
        httpx.delete(
            f"{server.url}/sandboxes/{sandbox['sandboxID']}",
            headers={"X-API-Key": server.api_key},
            timeout=30,
        )


def test_native_metadata_carries_env_workdir_and_labels(native_rootfs: Path) -> None:
    (meta_path,) = sorted(native_rootfs.glob("by-name/sandgate_template-base_*.json"))[-1:]
    meta = json.loads(meta_path.read_text())
    assert meta["workdir"] == "/home/user"
    assert meta["env"]["LANG"] == "C.UTF-8"
    assert meta["labels"]["sandgate.template"] == "base"
    tree = meta_path.with_suffix("")
    assert (tree / "home" / "user").stat().st_uid == 1000
    assert (tree / "etc" / "sudoers.d" / "user").is_file()


def test_doctor_without_an_engine_is_not_a_failure(native_rootfs: Path, tmp_path: Path) -> None:
    result = subprocess.run(
        ["sandgate", "doctor"],
        env={
            **os.environ,
            **_NO_DOCKER,
            "SANDGATE_HOME": str(tmp_path),
            "SANDGATE_RUNTIME__ROOTFS_DIR": str(native_rootfs),
            "COLUMNS": "250",
        },
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    rows = {line.split("│")[1].strip(): line for line in result.stdout.splitlines() if "│" in line}
    assert "warn" in rows["docker engine"]
    assert "ok" in rows["template base"] and "(no engine)" in rows["template base"]
    assert "bwrap: runtime.kind is auto, Docker is absent" in rows["runtime"]


def test_a_team_template_builds_without_a_container_engine(
    native_rootfs: Path, sandgate_server_factory: ServerFactory
) -> None:
    """The engine-less builder (``NativeLayers``) behind the E2B template API: a build with a
    ``COPY``, a root ``RUN``, ``ENV``, ``USER`` and ``WORKDIR`` on a bwrap server no Docker
    engine answers, a sandbox from it, and a rebuild answered from the layer directories."""
    server = sandgate_server_factory(
        extra_env={
            **_NO_DOCKER,
            "SANDGATE_RUNTIME": "bwrap",
            "SANDGATE_RUNTIME__DOCKER__BASE_URL": _NO_DOCKER["DOCKER_HOST"],
            "SANDGATE_RUNTIME__ROOTFS_DIR": str(native_rootfs),
        },
    )
    # A team of its own: the layer directories outlive this server (they are keyed by team).
    _, client = new_team_api(server, "native")
    name = f"native-{secrets.token_hex(4)}"
    archive = io.BytesIO()
    with tarfile.open(fileobj=archive, mode="w:gz") as tar:
        data = b"copied-natively\n"
        info = tarfile.TarInfo("hello.txt")
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))
    files_hash = hashlib.sha256(archive.getvalue()).hexdigest()
    created = client.post("/v3/templates", json={"name": name})
    assert created.status_code == 202, created.text
    ids = created.json()
    template_id = ids["templateID"]
    link = client.get(f"/templates/{template_id}/files/{files_hash}").json()
    assert httpx.put(link["url"], content=archive.getvalue()).status_code == 200
    nonce = secrets.token_hex(8)
    body = {
        "fromTemplate": "base",
        "steps": [
            {"type": "ENV", "args": ["NATIVE_VAR", "native-env"]},
            {"type": "RUN", "args": [f"echo {nonce} > /etc/native-mark", "root"]},
            {
                "type": "COPY",
                "args": ["hello.txt", "/opt/hello.txt", "user", "0604"],
                "filesHash": files_hash,
            },
            {"type": "USER", "args": ["builder"]},
            {"type": "WORKDIR", "args": ["/opt/work"]},
        ],
    }
    tree = native_rootfs / "by-name"
    try:
        started = client.post(f"/v2/templates/{template_id}/builds/{ids['buildID']}", json=body)
        assert started.status_code == 202, started.text
        first = wait_build(client, template_id, ids["buildID"])
        assert first["status"] == "ready", first
        messages = [e["message"] for e in first["logEntries"]]
        assert not [m for m in messages if m.startswith("CACHED")], messages
        assert any(m.startswith("built sandgate/template-") for m in messages), messages
        assert "runtime=bwrap" in server.log_text() or '"runtime": "bwrap"' in server.log_text()
        # Built as a tree where the bwrap runtime looks (no image anywhere).
        assert list(tree.glob(f"sandgate_template-{template_id}_*.json")), "no native tree"

        sandbox = create(server.url, client.headers["X-API-Key"], templateID=name, timeout=120)
        try:
            result = run(
                server.url,
                sandbox["sandboxID"],
                sandbox["envdAccessToken"],
                "whoami; pwd; echo $NATIVE_VAR; cat /etc/native-mark /opt/hello.txt; "
                "stat -c '%U %a' /opt/hello.txt",
            )
        finally:
            client.delete(f"/sandboxes/{sandbox['sandboxID']}")
        assert result.exit_code == 0, result.stderr
        assert result.stdout.splitlines() == [
            "builder",
            "/opt/work",
            "native-env",
            nonce,
            "copied-natively",
            "user 604",
        ]

        again = start_build(client, name, body)
        second = wait_build(client, *again)
        assert second["status"] == "ready", second
        cached = [e["message"] for e in second["logEntries"] if e["message"].startswith("CACHED")]
        # Every layer the first build made (the base and each step that changes the tree)
        # comes from the cache now, and nothing runs.
        ran = [
            m
            for m in messages
            if m.startswith("[") and not m.startswith(("[finalize]", "[base] FROM"))
        ]
        assert len(ran) >= 5, messages
        assert cached == ["CACHED " + m for m in ran], (cached, ran)
    finally:
        client.delete(f"/templates/{template_id}")
        # The flattened tree is a copy of base (hundreds of MiB) in a directory every test run
        # shares; the deleted template's tree is nobody's now.
        for path in tree.glob(f"sandgate_template-{template_id}_*"):
            if path.is_dir():
                shutil.rmtree(path)
            else:
                path.unlink()
