"""Templates as the E2B SDKs and CLI build them (issue 18, part A), on both runtimes.

The SDK scenario builds one template with every builder step kind, starts a sandbox whose
start command must already answer when ``create`` returns, rebuilds it with one changed step
(the unchanged prefix must come from the layer cache), and drives tags, aliases, background
builds and failures. All clients of one server build the same template name, so only the first
pays for the steps: the rest prove the cache.

Contract: shared/e2b-protocol.md §2.5.
"""

from __future__ import annotations

import secrets
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import docker
import pytest

from tests.fixtures.server import RunningServer

from .clients import CLI, CLIENTS, PreparedClient, prepare
from .expect import assert_sdk_version

pytestmark = pytest.mark.compat

TEMPLATE = "compat-every-step"
#: The one client the second template runs with (per runtime): the ceiling Python pin, whose
#: SDK converts Dockerfiles itself. The steps it adds are wire requests the first template's
#: scenario already sends from every pin (RUN, COPY, ENV, WORKDIR, fromImage, force).
STEPS_CLIENT = "py-e2b-2.63.0"


@pytest.mark.one_runtime_per_client
def test_template_build_with_every_step_kind(
    client: PreparedClient, runtime_e2b_env: dict[str, str]
) -> None:
    result = client.run("templates", runtime_e2b_env, [TEMPLATE], timeout=900)
    assert_sdk_version(result, client)
    probe = result["probe"]
    assert probe["exit_code"] == 0, probe
    lines = probe["stdout"].splitlines()
    expected = [
        "builder",  # set_user: the sandbox's default user
        "/opt/work",  # set_workdir: its default working directory
        "env-ok",  # set_envs
        "step-as-user",  # run_cmd runs as `user` by default
        "root-ok",  # run_cmd(user="root")
        "user 750",  # copy(user=, mode=)
        "data.txt",  # a symlink in a copied directory stays a symlink
        "single-ok",  # copy of one file
        "/usr/bin/sgtree",  # apt_install (from a local repository: no network)
    ]
    if client.lang == "python":
        expected.append("wheel-ok")  # pip_install (a local wheel: PyPI is not reachable)
    expected += [
        "cloned",  # git_clone
        "made",  # make_dir
        "/opt/single.txt",  # make_symlink
        "gone",  # remove
        "renamed-ok",  # rename
        "v1",  # the start command answered before create returned (no wait in between)
    ]
    assert lines == expected, probe

    # The rebuild changes the marker step (16 of 18 in Python, 15 of 17 in JS, which has no
    # pip_install): the base and every step before it come from the layer cache.
    changed, total = (16, 18) if client.lang == "python" else (15, 17)
    cached = result["rebuild_cached"]
    assert len(cached) == changed - 1, cached
    assert cached[0].startswith("CACHED [base]"), cached
    assert result["rebuild_ran"][0].startswith(f"[{changed}/{total}] RUN"), result["rebuild_ran"]
    assert result["marker_after_rebuild"]["stdout"] == "v2\n"

    assert result["exists"] is True
    assert result["exists_base"] is True
    assert result["exists_missing"] is False
    assert result["assign"]["ok"] is True, result["assign"]
    assert result["tags"] == ["default", "stable"]
    assert result["tagged_marker"]["stdout"] == "v2\n"
    assert result["remove_tags"]["ok"] is True, result["remove_tags"]
    assert result["tags_after_remove"] == ["default"]
    assert result["background_final"] == "ready"

    failed = result["failed"]["error"]
    assert failed["class"] in ("BuildException", "BuildError"), failed  # Python / JS
    assert "[1/1] RUN echo boom-tail-line; exit 3" in failed["message"], failed
    assert "exit 3" in failed["message"] and "boom-tail-line" in failed["message"], failed
    missing = result["missing_image"]["error"]
    assert missing["class"] in ("BuildException", "BuildError"), missing
    assert "sandgate-missing.invalid/nothing:1" in missing["message"], missing


@pytest.fixture
def local_image() -> Iterator[str]:
    """The shipped ``code-interpreter-v1`` image (it has Node.js and npm) under a name of this
    test's own, known only to the local engine (no registry has it); the tag is removed
    afterwards (the image itself stays)."""
    from sandgate.templates import TemplateBuilder

    client = docker.from_env()
    try:
        built = TemplateBuilder(client).status("code-interpreter-v1")
        assert built is not None, "the shipped code-interpreter-v1 template is not built"
        name = f"sandgate-compat-local/ci-{secrets.token_hex(4)}"
        client.images.get(built.image_id).tag(name, "v1")
        yield f"{name}:v1"
        client.images.remove(f"{name}:v1", noprune=True)
    finally:
        client.close()


def test_template_build_from_a_dockerfile_with_npm_ready_cmd_and_skip_cache(
    runtime_e2b_env: dict[str, str], local_image: str
) -> None:
    client = prepare(next(spec for spec in CLIENTS if spec.name == STEPS_CLIENT))
    name = f"compat-steps-{secrets.token_hex(3)}"
    result = client.run("templates", runtime_e2b_env, ["steps", name, local_image], timeout=900)
    assert_sdk_version(result, client)
    first = result["probe"]
    assert first["exit_code"] == 0, (first, result["logs"][-30:])
    lines = first["stdout"].splitlines()
    assert lines[:-1] == [
        "user",  # from_dockerfile: the E2B default user after the Dockerfile's steps
        "/opt/df",  # its WORKDIR
        "df-ok",  # its ENV
        "dockerfile-ok",  # its RUN (after a COPY of the npm tarball)
        "npm-ok",  # npm_install of a local tarball (-g: its bin is on PATH)
        "ready-ran",  # set_ready_cmd ran before create returned
    ], first
    assert any(f"FROM {local_image}" in line for line in result["logs"]), result["logs"][:5]
    assert not any("pulling" in line for line in result["logs"]), result["logs"][:5]

    # The rebuild: every step before skip_cache() from the cache, the forced one run again.
    cached = result["rebuild_cached"]
    ran = result["rebuild_ran"]
    assert cached[0].startswith("CACHED [base]"), cached
    assert any("RUN node --version" in line for line in cached), cached
    assert any("npm install -g /opt/df/sgnpm-1.0.0.tgz" in line for line in cached), cached
    assert not any("random/uuid" in line for line in cached), cached
    assert any("RUN cat /proc/sys/kernel/random/uuid" in line for line in ran), ran
    second = result["probe_after_rebuild"]
    assert second["exit_code"] == 0, second
    assert second["stdout"].splitlines()[:-1] == lines[:-1]
    assert second["stdout"].splitlines()[-1] != lines[-1]  # the forced step's new output


def _cli(server: RunningServer, args: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    cli = prepare(CLI)
    entry = cli.node_modules / "@e2b" / "cli" / "dist" / "index.js"
    env: dict[str, Any] = {
        "PATH": "/usr/local/bin:/usr/bin:/bin",
        "HOME": str(cwd),
        "NO_COLOR": "1",
        "CI": "1",
        **server.env,
    }
    return subprocess.run(
        ["node", str(entry), *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )


def test_cli_template_create_list_sandbox_delete(
    runtime_server: RunningServer, tmp_path: Path
) -> None:
    (tmp_path / "e2b.Dockerfile").write_text(
        "FROM e2bdev/base\nRUN echo cli-built > /tmp/cli-marker\nCOPY hello.txt /opt/hello.txt\n"
    )
    (tmp_path / "hello.txt").write_text("hello-cli\n")
    created = _cli(
        runtime_server, ["template", "create", "compat-cli", "-d", "e2b.Dockerfile"], tmp_path
    )
    assert created.returncode == 0, created.stdout + created.stderr

    listed = _cli(runtime_server, ["template", "list", "--format", "json"], tmp_path)
    assert listed.returncode == 0, listed.stdout + listed.stderr
    assert "compat-cli" in listed.stdout and "base" in listed.stdout, listed.stdout

    sandbox = _cli(runtime_server, ["sandbox", "create", "compat-cli", "--detach"], tmp_path)
    assert sandbox.returncode == 0, sandbox.stdout + sandbox.stderr

    deleted = _cli(runtime_server, ["template", "delete", "compat-cli", "--yes"], tmp_path)
    assert deleted.returncode == 0, deleted.stdout + deleted.stderr
    after = _cli(runtime_server, ["template", "list", "--format", "json"], tmp_path)
    assert "compat-cli" not in after.stdout, after.stdout
