"""A full machine inside (issue 11, design §2): a writable root of the sandbox's own, programs
runnable anywhere, sudo to root of the sandbox's user namespace, venvs and package tools that
fail clearly when the operator allows no registry. Every test runs on both runtimes."""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from sandgate.runtimes._uids import UID_BASE
from tests.fixtures.runtimes import RuntimeView
from tests.fixtures.server import RunningServer
from tests.framework.envd import create, run
from tests.framework.posture import cmdline, proc_status, process_tree

SMALL_DISK_MIB = 64


def _sh(server: RunningServer, sandbox: dict[str, Any], command: str, **kwargs: Any) -> Any:
    return run(server.url, sandbox["sandboxID"], sandbox.get("envdAccessToken"), command, **kwargs)


def _kill(server: RunningServer, sandbox: dict[str, Any]) -> None:
    httpx.delete(
        f"{server.url}/sandboxes/{sandbox['sandboxID']}", headers={"X-API-Key": server.api_key}
    )


@pytest.fixture(scope="module")
def small_disk_server(runtime: str, runtime_server_factory: Any) -> RunningServer:
    server: RunningServer = runtime_server_factory(
        extra_env={"SANDGATE_LIMITS__DISK_MIB": str(SMALL_DISK_MIB)}
    )
    return server


@pytest.fixture
def small_sandbox(small_disk_server: RunningServer) -> Iterator[dict[str, Any]]:
    created = create(small_disk_server.url, small_disk_server.api_key)
    yield created
    _kill(small_disk_server, created)


def test_root_is_writable_and_each_sandbox_has_its_own_layer(
    runtime_server: RunningServer, runtime_sandbox: dict[str, Any]
) -> None:
    marker = f"layer-{time.time_ns()}"
    wrote = _sh(
        runtime_server,
        runtime_sandbox,
        f"echo {marker} > /usr/local/bin/marker && echo {marker} >> /etc/motd && "
        "mkdir -p /opt/tool && touch /opt/tool/x && cat /usr/local/bin/marker",
        user="root",
    )
    assert wrote.exit_code == 0, wrote.stderr
    assert wrote.stdout.strip() == marker
    other = create(runtime_server.url, runtime_server.api_key)
    try:
        seen = _sh(
            runtime_server,
            other,
            "cat /usr/local/bin/marker; grep -c layer- /etc/motd; ls /opt/tool",
            user="root",
        )
        assert marker not in seen.stdout
        assert seen.stdout.split()[0] == "0"  # grep -c: /etc/motd is the template's
        assert "No such file" in seen.stderr
    finally:
        _kill(runtime_server, other)


def test_user_writes_home_tmp_and_dirs_made_with_sudo(
    runtime_server: RunningServer, runtime_sandbox: dict[str, Any]
) -> None:
    result = _sh(
        runtime_server,
        runtime_sandbox,
        "set -e; echo a > ~/a; echo b > /tmp/b; sudo mkdir /workspace; "
        "sudo chown user:user /workspace; echo c > /workspace/c; "
        "cat ~/a /tmp/b /workspace/c; ls -ld /workspace | cut -d' ' -f3; "
        "ls -a ~ | grep -c bashrc",
    )
    assert result.exit_code == 0, result.stderr
    assert result.stdout.split() == ["a", "b", "c", "user", "1"]
    # ...but not the template's system paths without sudo.
    denied = _sh(runtime_server, runtime_sandbox, "touch /usr/local/bin/x")
    assert denied.exit_code != 0 and "Permission denied" in denied.stderr


def test_programs_run_from_tmp_home_and_the_root_layer(
    runtime_server: RunningServer, runtime_sandbox: dict[str, Any]
) -> None:
    script = "printf '#!/bin/sh\\necho ran-$0\\n' > {path} && chmod +x {path} && {path}"
    for path in ("/tmp/run.sh", "/home/user/run.sh"):
        result = _sh(runtime_server, runtime_sandbox, script.format(path=path))
        assert result.exit_code == 0, (path, result.stderr)
        assert result.stdout.strip() == f"ran-{path}"
    copied = _sh(
        runtime_server,
        runtime_sandbox,
        "sudo cp /bin/echo /usr/local/bin/echo2 && /usr/local/bin/echo2 layer",
    )
    assert copied.exit_code == 0 and copied.stdout.strip() == "layer", copied.stderr
    # nosuid stays: a setuid bit set inside gives nothing.
    setuid = _sh(
        runtime_server,
        runtime_sandbox,
        "sudo cp /usr/bin/id /tmp/id && sudo chmod u+s /tmp/id && /tmp/id -u",
    )
    assert setuid.exit_code == 0 and setuid.stdout.strip() == "1000", setuid.stderr


def test_sudo_is_root_inside_and_an_unprivileged_uid_on_the_host(
    runtime: str,
    runtime_server: RunningServer,
    runtime_view: RuntimeView,
    runtime_sandbox: dict[str, Any],
) -> None:
    inside = _sh(runtime_server, runtime_sandbox, "sudo id -u; sudo -u user id -un; id -u")
    assert inside.exit_code == 0, inside.stderr
    assert inside.stdout.split() == ["0", "user", "1000"]
    marker = f"{time.time_ns() % 100000}.25"
    # The command returns once the sleeper runs (pgrep sees only this sandbox's processes).
    started = _sh(
        runtime_server,
        runtime_sandbox,
        f"sudo sleep {marker} >/dev/null 2>&1 & "
        f"until pgrep -f '^sleep {marker}$' >/dev/null; do :; done; echo started",
    )
    assert started.exit_code == 0, started.stderr
    init = runtime_view.init_pid(runtime_sandbox["sandboxID"])
    sleeper = _find_descendant(init, f"sleep\0{marker}")
    uids = proc_status(sleeper)["Uid"].split()
    assert len(set(uids)) == 1
    assert int(uids[0]) >= UID_BASE, f"sudo's root is host uid {uids[0]}"
    assert proc_status(sleeper)["NoNewPrivs"] == "1"


def test_sudo_options_exit_status_and_refusal(
    runtime_server: RunningServer, runtime_sandbox: dict[str, Any]
) -> None:
    result = _sh(
        runtime_server,
        runtime_sandbox,
        "sudo -n true && sudo -E env | grep -c '^SUDO_USER=user$'; "
        "sudo sh -c 'exit 7'; echo status=$?; "
        "echo piped | sudo tee /root/piped >/dev/null && sudo cat /root/piped; "
        "sudo -i pwd; sudo -u user sh -c 'cd; pwd'; FOO=1 sudo FOO=2 sh -c 'echo foo=$FOO'; "
        "sudo no-such-command-x; echo missing=$?",
    )
    lines = result.stdout.split()
    assert lines == ["1", "status=7", "piped", "/root", "/home/user", "foo=2", "missing=1"], (
        result.stdout,
        result.stderr,
    )
    assert "no-such-command-x: command not found" in result.stderr


def test_sudo_turned_off_by_the_operator(runtime: str, runtime_server_factory: Any) -> None:
    server: RunningServer = runtime_server_factory(extra_env={"SANDGATE_SANDBOX__SUDO": "false"})
    sandbox = create(server.url, server.api_key)
    try:
        refused = _sh(server, sandbox, "sudo id -u")
        assert refused.exit_code == 1
        assert "sandbox.sudo" in refused.stderr
        # The API's own root stays available to the operator's callers.
        assert _sh(server, sandbox, "id -u", user="root").stdout.strip() == "0"
    finally:
        _kill(server, sandbox)


def test_python_venv_and_pip_without_registries_refused_clearly(
    runtime_server: RunningServer, runtime_sandbox: dict[str, Any]
) -> None:
    venv = _sh(
        runtime_server,
        runtime_sandbox,
        "python3 -m venv /tmp/venv && /tmp/venv/bin/python -c 'import sys; print(sys.prefix)'",
    )
    assert venv.exit_code == 0, venv.stderr
    assert venv.stdout.strip() == "/tmp/venv"
    started = time.monotonic()
    pip = _sh(
        runtime_server,
        runtime_sandbox,
        "pip install --no-cache-dir --retries 1 --timeout 10 sandgate-not-installed 2>&1",
        timeout_ms=120_000,
    )
    elapsed = time.monotonic() - started
    assert pip.exit_code != 0
    assert "externally-managed" not in pip.stdout
    assert "403" in pip.stdout, pip.stdout
    assert elapsed < 60, f"pip took {elapsed:.0f}s to be refused"


def test_apt_get_install_knows_its_packages_and_is_refused_clearly(
    runtime_server: RunningServer, runtime_sandbox: dict[str, Any]
) -> None:
    """The image carries apt's package lists (no `apt-get update` first); with no registry
    allowed the download is refused by the egress proxy at once, saying how to allow it."""
    policy = _sh(runtime_server, runtime_sandbox, "apt-cache policy jq | grep -c Candidate")
    assert policy.stdout.strip() == "1", (policy.stdout, policy.stderr)
    started = time.monotonic()
    apt = _sh(
        runtime_server, runtime_sandbox, "sudo apt-get install -y jq 2>&1", timeout_ms=120_000
    )
    assert apt.exit_code != 0
    assert "403" in apt.stdout and "Sandgate egress" in apt.stdout, apt.stdout[-2000:]
    assert time.monotonic() - started < 60


def test_disk_quota_is_enospc_inside_and_a_neighbour_keeps_writing(
    runtime: str, small_disk_server: RunningServer, small_sandbox: dict[str, Any]
) -> None:
    fill = _sh(
        small_disk_server,
        small_sandbox,
        f"dd if=/dev/zero of=/tmp/fill bs=1M count={SMALL_DISK_MIB * 2} 2>&1; "
        "sudo dd if=/dev/zero of=/usr/fill bs=1M count=8 2>&1; "
        "echo x > ~/after; echo rc=$?",
    )
    assert "No space left on device" in fill.stdout, fill.stdout
    assert "rc=1" in fill.stdout
    # The bytes went to the sandbox's capped in-memory disk, not to the host's.
    stage = Path("/run/sandgate-rt/stage") / small_sandbox["sandboxID"] / "disk"
    stats = os.statvfs(stage)
    assert stats.f_bavail * stats.f_frsize < 1024 * 1024
    neighbour = create(small_disk_server.url, small_disk_server.api_key)
    try:
        ok = _sh(
            small_disk_server,
            neighbour,
            "dd if=/dev/zero of=/tmp/ok bs=1M count=16 2>/dev/null && stat -c %s /tmp/ok",
        )
        assert ok.exit_code == 0 and ok.stdout.strip() == str(16 * 1024 * 1024), ok.stderr
    finally:
        _kill(small_disk_server, neighbour)
    # The full sandbox still answers, and freeing space gives it back.
    again = _sh(small_disk_server, small_sandbox, "rm /tmp/fill && echo y > ~/again && cat ~/again")
    assert again.exit_code == 0 and again.stdout.strip() == "y", again.stderr


def test_layer_survives_pause_resume_and_gateway_restart(
    runtime: str, runtime_server_factory: Any
) -> None:
    server: RunningServer = runtime_server_factory()
    sandbox = create(server.url, server.api_key, timeout=600)
    sid = sandbox["sandboxID"]
    headers = {"X-API-Key": server.api_key}
    try:
        wrote = _sh(server, sandbox, "sudo sh -c 'echo kept > /opt/kept'; echo home > ~/kept")
        assert wrote.exit_code == 0, wrote.stderr
        assert httpx.post(f"{server.url}/sandboxes/{sid}/pause", headers=headers).status_code == 204
        resumed = httpx.post(
            f"{server.url}/sandboxes/{sid}/connect", json={"timeout": 600}, headers=headers
        )
        assert resumed.status_code in (200, 201), resumed.text
        server.restart(hard=True)
        read = _sh(server, sandbox, "cat /opt/kept ~/kept")
        assert read.stdout.split() == ["kept", "home"], read.stderr
    finally:
        _kill(server, sandbox)
    assert not (Path("/run/sandgate-rt/stage") / sid).exists()


def _find_descendant(root: int, cmdline_prefix: str) -> int:
    """A process under ``root`` whose command line starts with ``cmdline_prefix``."""
    for pid in process_tree(root):
        if cmdline(pid).decode(errors="replace").startswith(cmdline_prefix):
            return pid
    raise AssertionError(f"no process {cmdline_prefix!r} under {root}")


_TINY_PACKAGE = (
    "import os, pathlib\n"
    "root = pathlib.Path('/tmp/sgtiny')\n"
    "root.mkdir(exist_ok=True)\n"
    "(root / 'pyproject.toml').write_text('[build-system]\\nrequires = [\"setuptools\"]\\n'\n"
    '    \'build-backend = "setuptools.build_meta"\\n[project]\\nname = "sgtiny"\\n\'\n'
    "    'version = \"1.0\"\\n')\n"
    "(root / 'sgtiny.py').write_text('VALUE = 42\\n')\n"
)


def _execute(server: RunningServer, sandbox: dict[str, Any], code: str) -> str:
    """Runs one cell through the code interpreter's HTTP API; returns its stdout."""
    response = httpx.post(
        f"{server.url}/execute",
        json={"code": code},
        headers={
            "E2b-Sandbox-Id": sandbox["sandboxID"],
            "E2b-Sandbox-Port": "49999",
            "E2B-Traffic-Access-Token": sandbox["trafficAccessToken"],
        },
        timeout=180,
    )
    assert response.status_code == 200, response.text
    stdout, errors = [], []
    for line in response.text.splitlines():
        event = json.loads(line)
        if event.get("type") == "stdout":
            stdout.append(event["text"])
        elif event.get("type") == "error":
            errors.append(event)
    assert not errors, errors
    return "".join(stdout)


def test_interpreter_sees_packages_installed_while_it_runs(
    runtime_server: RunningServer,
) -> None:
    """`!pip install` in a cell (as the sandbox's user, no PEP 668 flags) lands where the
    running kernel imports from; `npm install` works in the same template."""
    sandbox = create(runtime_server.url, runtime_server.api_key, templateID="code-interpreter-v1")
    try:
        _execute(runtime_server, sandbox, _TINY_PACKAGE)
        installed = _execute(
            runtime_server,
            sandbox,
            "!pip install --no-build-isolation --no-index /tmp/sgtiny 2>&1 | tail -1",
        )
        assert "Successfully installed sgtiny-1.0" in installed, installed
        imported = _execute(
            runtime_server, sandbox, "import sgtiny, numpy\nprint(sgtiny.VALUE, sgtiny.__file__)"
        )
        value, where = imported.split()
        assert value == "42" and where.startswith("/home/user/.local/lib/python3"), imported
        npm = _sh(
            runtime_server,
            sandbox,
            "mkdir -p /tmp/pkg /tmp/app && cd /tmp/pkg && npm init -y >/dev/null && "
            "echo 'module.exports = 7' > index.js && cd /tmp/app && npm init -y >/dev/null && "
            "npm install --offline --no-audit --no-fund ../pkg >/dev/null && "
            "node -e 'console.log(require(\"pkg\"))'",
        )
        assert npm.exit_code == 0 and npm.stdout.strip() == "7", (npm.stdout, npm.stderr)
    finally:
        _kill(runtime_server, sandbox)
