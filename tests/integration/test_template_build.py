"""Builds the shipped ``base`` template for real and checks what sandboxes get from it.

The first run on a machine bootstraps or pulls Debian (about a minute); later runs reuse
the current image and take about a second.
"""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from typing import Any

import docker
import pytest

from sandgate.templates import BuiltTemplate, TemplateBuilder

pytestmark = pytest.mark.docker

PROBE = 'id; echo $HOME; python3 -c "print(1)"; git --version; curl --version; ps --version'


@pytest.fixture(scope="module")
def client() -> Iterator[Any]:
    client = docker.from_env()
    yield client
    client.close()


@pytest.fixture(scope="module")
def base(client: Any) -> BuiltTemplate:
    return TemplateBuilder(client).build("base")


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["docker", "run", "--rm", *args], capture_output=True, text=True, timeout=60
    )


def test_build_is_current_and_tagged(client: Any, base: BuiltTemplate) -> None:
    builder = TemplateBuilder(client)
    assert builder.status("base") == base
    assert builder.build("base") == base
    image = client.images.get("sandgate/template-base:latest")
    assert image.id == base.image_id
    assert image.labels["sandgate.template"] == "base"
    assert image.labels["sandgate.template.digest"] == base.digest
    assert base.image_ref == f"sandgate/template-base:{base.digest[:12]}"
    assert "LANG=C.UTF-8" in image.attrs["Config"]["Env"]


def test_sandbox_user_gets_the_e2b_base_toolset(base: BuiltTemplate) -> None:
    result = run("--user", "1000:1000", base.image_ref, "bash", "-lc", PROBE)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0].startswith("uid=1000(user) gid=1000(user)")
    assert lines[1] == "/home/user"
    assert lines[2] == "1"
    assert lines[3].startswith("git version ")
    assert any(line.startswith("curl ") for line in lines)
    assert lines[-1].startswith("ps from procps-ng")


def test_user_account_home_sudo_and_mount_points(base: BuiltTemplate) -> None:
    script = (
        "getent passwd user; id -nG user; stat -c '%u:%g' /home/user; ls -A /home/user; "
        "test -d /run/sandgate && test -d /opt/sandgate && echo dirs-ok; "
        "sudo -l -U user | grep -c NOPASSWD; echo $LANG"
    )
    result = run(base.image_ref, "bash", "-c", script)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0] == "user:x:1000:1000::/home/user:/bin/bash"
    assert set(lines[1].split()) == {"user", "sudo"}
    assert lines[2] == "1000:1000"
    assert {".bashrc", ".profile"} <= set(lines[3:-3])
    assert lines[-3:] == ["dirs-ok", "1", "C.UTF-8"]


def test_image_runs_with_a_read_only_root(base: BuiltTemplate) -> None:
    result = run(
        "--read-only",
        "--user",
        "1000:1000",
        base.image_ref,
        "bash",
        "-lc",
        "python3 -c 'print(2)'; touch /home/user/x && echo writable || echo read-only",
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == ["2", "read-only"]
