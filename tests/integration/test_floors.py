"""Runtime floors are enforced, not just reported (issue 12, class 6): a real ``sandgate serve``
on this host's Docker engine and bubblewrap, and the real ``sandgate doctor``.

Each server here gets one extra floor (``runtime.extra_floors``) that no runc or kernel
passes, ``CVE-2099-0001``/``-0002``, so every test refuses on any host; and each also checks
what the shipped floors find on this host (the CI host's Debian 12 runc is below the
November 2025 floor) appears in the same answers, judged by the same code in this process.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import docker
import httpx
import pytest

from sandgate.config import load_config
from sandgate.runtimes.floors import Finding, check_floors
from sandgate.sandboxes.publish import STAGING
from tests.fixtures.server import (
    FLOOR_EXCEPTIONS_ENV,
    TEST_FLOOR_EXCEPTIONS,
    RunningServer,
    ServerFactory,
)
from tests.framework.envd import create, run

pytestmark = [pytest.mark.docker, pytest.mark.bwrap]

RUNC_CVE = "CVE-2099-0001"
KERNEL_CVE = "CVE-2099-0002"
_EXTRA_FLOORS = f"""\
floors:
  - id: test-runc
    component: runc
    cves: [{RUNC_CVE}]
    summary: a runc bug only this test knows, fixed in a release that does not exist
    fixed: ["99.0.0"]
    sources: [tests/integration/test_floors.py]
  - id: test-kernel
    component: kernel
    cves: [{KERNEL_CVE}]
    summary: a kernel bug only this test knows
    fixed: ["99.0"]
    sources: [tests/integration/test_floors.py]
"""
_RUNC_ONLY = _EXTRA_FLOORS.split("  - id: test-kernel")[0]


@pytest.fixture
def floors_file(tmp_path: Path) -> Path:
    path = tmp_path / "runc-floor.yaml"
    path.write_text(_RUNC_ONLY)
    return path


@pytest.fixture
def kernel_floors_file(tmp_path: Path) -> Path:
    path = tmp_path / "kernel-floor.yaml"
    path.write_text(_EXTRA_FLOORS)
    return path


def _env(kind: str, floors: Path, exceptions: list[dict[str, Any]]) -> dict[str, str]:
    return {
        "SANDGATE_RUNTIME": kind,
        "SANDGATE_RUNTIME__EXTRA_FLOORS": str(floors),
        FLOOR_EXCEPTIONS_ENV: json.dumps(exceptions),
        "COLUMNS": "400",  # doctor's table: one line per row
    }


def _blocking_here(env: Mapping[str, str], kind: str) -> tuple[Finding, ...]:
    """What the floors refuse on this host for ``kind``, judged in this process."""
    config = load_config(None, environ={"SANDGATE_HOME": "/nonexistent", **env})
    return check_floors(config, docker=kind == "docker", bwrap=kind == "bwrap").blocking(kind)


def _health(server: RunningServer) -> dict[str, Any]:
    response = httpx.get(f"{server.url}/health", timeout=10)
    assert response.status_code == 200
    body: dict[str, Any] = response.json()
    assert body["status"] == "ok"  # what clients that only probe liveness read
    return body


def _containers(server: RunningServer) -> list[str]:
    instance = (server.home / "instance-id").read_text().strip()
    found = docker.from_env().containers.list(
        all=True, filters={"label": f"sandgate.instance={instance}"}
    )
    return [c.name for c in found]


def _doctor_rows(server: RunningServer) -> tuple[int, dict[str, str]]:
    """doctor's exit status and, per floor row (and the runtime row), the row's text."""
    proc = server.cli("doctor", check=False)
    assert "Traceback" not in proc.stderr, proc.stderr
    rows = {}
    for line in proc.stdout.splitlines():
        cells = [cell.strip() for cell in line.split("│")]
        if len(cells) > 2 and (cells[1].startswith("floor ") or cells[1] == "runtime"):
            rows[cells[1]] = line
    return proc.returncode, rows


def _wait_for_log(server: RunningServer, needle: str, count: int = 1) -> None:
    deadline = time.monotonic() + 120
    while server.log_text().count(needle) < count:
        assert time.monotonic() < deadline, f"{needle!r} never logged:\n{server.log_text()}"
        time.sleep(0.1)


@pytest.fixture
def cleanup() -> Iterator[list[tuple[RunningServer, str]]]:
    created: list[tuple[RunningServer, str]] = []
    yield created
    for server, sandbox_id in created:
        httpx.delete(f"{server.url}/sandboxes/{sandbox_id}", headers={"X-API-Key": server.api_key})


def test_auto_skips_docker_below_its_floor_for_bwrap_and_says_why(
    sandgate_server_factory: ServerFactory,
    floors_file: Path,
    cleanup: list[tuple[RunningServer, str]],
) -> None:
    env = _env("auto", floors_file, [])
    server = sandgate_server_factory(extra_env=env)
    health = _health(server)
    assert (health["runtime"], health["floors"], health["floor_exceptions"]) == ("bwrap", "ok", [])
    log = server.log_text()
    assert "runtime.selected" in log and "runtime=bwrap" in log
    assert "answers but is below its patched floors" in log
    for finding in _blocking_here(env, "docker"):
        assert finding.component == "runc", finding.problem()
        for cve in finding.open_cves:
            assert cve in log, f"the reason does not name {cve}"
    assert RUNC_CVE in log

    sandbox = create(server.url, server.api_key, timeout=120)
    cleanup.append((server, sandbox["sandboxID"]))
    assert (server.home / "bwrap" / sandbox["sandboxID"] / "state.json").is_file()
    assert _containers(server) == [], "no container was started"
    result = run(server.url, sandbox["sandboxID"], sandbox["envdAccessToken"], "echo ok")
    assert result.stdout == "ok\n"


def test_explicit_docker_below_its_floor_refuses_every_create_and_doctor_fails(
    sandgate_server_factory: ServerFactory, floors_file: Path
) -> None:
    env = {**_env("docker", floors_file, []), "SANDGATE_TEMPLATES__WARM_POOL": "{base: 1}"}
    server = sandgate_server_factory(extra_env=env)
    log = server.log_text()
    assert "runtime.below_floor" in log and "No sandbox will start" in log
    assert _health(server)["floors"] == "below"
    # The warm pool's boots at start are refused too, until it gives up (nothing under way).
    _wait_for_log(server, "pool.gave_up")

    response = httpx.post(
        f"{server.url}/v2/sandboxes",
        json={"templateID": "base"},
        headers={"X-API-Key": server.api_key},
        timeout=60,
    )
    assert response.status_code == 503, response.text
    body = response.json()
    assert (body["code"], body["error_code"]) == (503, "runtime_below_floor")
    blocking = _blocking_here(env, "docker")
    assert {f.component for f in blocking} == {"runc"}
    for finding in blocking:
        for part in (f"runc {finding.found}", finding.floor.required, *finding.open_cves):
            assert part in body["message"], part
    assert RUNC_CVE in body["message"]
    assert "upgrade" in body["message"] and "runtime.accept_below_floor" in body["message"]

    # The create's take had the pool try again: refused the same way, it gives up again,
    # and nothing was started or left behind.
    _wait_for_log(server, "pool.gave_up", count=2)
    assert "below its patched floors" in server.log_text().split("pool.boot_failed", 1)[1]
    assert _containers(server) == []
    listed = httpx.get(f"{server.url}/v2/sandboxes", headers={"X-API-Key": server.api_key})
    assert listed.status_code == 200 and listed.json() == []
    assert [p for p in (server.home / "sandboxes").glob("*") if p.name != STAGING] == []

    status, rows = _doctor_rows(server)
    assert status == 1
    failing = [row for row in rows.values() if "│ fail" in row]
    assert any(f"floor runc: {RUNC_CVE}" in row for row in failing), rows
    for finding in blocking:
        name = f"floor runc: {', '.join(finding.floor.cves)}"
        assert name in rows and "│ fail" in rows[name], rows


def test_accepted_exception_lets_docker_run_and_is_shown_everywhere(
    sandgate_server_factory: ServerFactory,
    floors_file: Path,
    cleanup: list[tuple[RunningServer, str]],
) -> None:
    accepted = [
        *TEST_FLOOR_EXCEPTIONS,
        {"component": "runc", "cves": [RUNC_CVE], "reason": "floor test: accepted on purpose"},
    ]
    env = _env("docker", floors_file, accepted)
    server = sandgate_server_factory(extra_env=env)
    health = _health(server)
    assert (health["runtime"], health["floors"]) == ("docker", "accepted")
    (runc,) = health["floor_exceptions"]
    assert runc["component"] == "runc" and RUNC_CVE in runc["cves"]
    assert set(runc) == {"component", "cves"}, "no versions on the unauthenticated route"

    sandbox = create(server.url, server.api_key, timeout=120)
    cleanup.append((server, sandbox["sandboxID"]))
    assert _containers(server) == [f"sandgate-{sandbox['sandboxID']}"]
    result = run(server.url, sandbox["sandboxID"], sandbox["envdAccessToken"], "echo ok")
    assert result.stdout == "ok\n"

    # One warning per accepted finding (this host's runc adds its own), at every start.
    warning = "runtime.floor_exception_accepted"
    reason = "floor test: accepted on purpose"
    ours = [line for line in server.log_text().splitlines() if warning in line and reason in line]
    assert len(ours) == 1 and RUNC_CVE in ours[0] and "found=" in ours[0]
    server.restart()
    lines = [line for line in server.log_text().splitlines() if warning in line]
    assert len([line for line in lines if reason in line]) == 2, "logged at every start"

    # (doctor's exit status also covers templates and disk, which other tests' builds on
    # this shared engine may change meanwhile: the rows are what this test is about.)
    _, rows = _doctor_rows(server)
    row = rows[f"floor runc: {RUNC_CVE}"]
    assert "│ accepted" in row and "floor test: accepted on purpose" in row
    assert not [r for r in rows.values() if "│ fail" in r], rows
    assert "│ ok" in rows["runtime"], rows["runtime"]


def test_kernel_floor_refuses_bwrap_too(
    sandgate_server_factory: ServerFactory, kernel_floors_file: Path
) -> None:
    server = sandgate_server_factory(extra_env=_env("bwrap", kernel_floors_file, []))
    assert _health(server)["floors"] == "below"
    response = httpx.post(
        f"{server.url}/v2/sandboxes",
        json={"templateID": "base"},
        headers={"X-API-Key": server.api_key},
        timeout=60,
    )
    assert response.status_code == 503, response.text
    assert response.json()["error_code"] == "runtime_below_floor"
    assert "kernel" in response.json()["message"] and KERNEL_CVE in response.json()["message"]
    assert not (server.home / "bwrap").exists() or list((server.home / "bwrap").iterdir()) == []
