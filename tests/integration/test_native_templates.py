"""Templates without a container engine: ``sandgate templates build --engine native`` and a
server on a host where no Docker engine answers (``DOCKER_HOST`` points nowhere), which must
pick bwrap, register the engine-less ``base`` and run sandboxes from it.

``scripts/test`` builds the native ``base`` into ``$SANDGATE_TEST_NATIVE_ROOTFS`` before the
suite (a debootstrap from Debian's mirror, reused while current), so the tests themselves
touch no network.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import httpx
import pytest

from tests.fixtures.server import ServerFactory
from tests.framework.envd import create, run

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
