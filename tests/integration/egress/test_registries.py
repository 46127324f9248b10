"""Issue 11, points 5, 6 and the refusals package tools show, on every runtime.

* A sandbox without registry access that runs ``pip install`` (or anything that CONNECTs to a
  registry) is refused at once, and the status line itself says which line of config fixes it;
  the guest's relay answers even when the sandbox has no egress rule at all.
* ``egress`` presets and ``sandgate serve --allow-package-registries`` open exactly their
  hosts: the names are mapped onto the host's loopback (``resolve_overrides``), so an allowed
  name ends in ``resolved_to_private`` (a preset never permits a private address), never on
  the real registry, and the audit record names the preset's rule.
* ``allowInternetAccess`` reports what the sandbox can reach, not the flag the SDK sent.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import httpx
import pytest

from tests.fixtures.egress import EgressSandbox, egress_decisions, kill, make_sandbox
from tests.fixtures.server import RunningServer

_PYPI_FIX = (
    "pypi.org:443 is not allowed (allow it with egress.allow: [pypi], or start sandgate "
    "serve with --allow-package-registries)"
)
_REGISTRY_NAMES = ("pypi.org", "files.pythonhosted.org", "registry.npmjs.org", "deb.debian.org")


@pytest.fixture(scope="module")
def registries_server(runtime_server_factory: Callable[..., RunningServer]) -> RunningServer:
    """Started with the flag; ``internet_access: [internet]``; registry and test names on
    loopback (``meta.test`` on the metadata address)."""
    overrides = {name: ["127.0.0.1"] for name in (*_REGISTRY_NAMES, "example.test")}
    overrides["meta.test"] = ["169.254.169.254"]
    return runtime_server_factory(
        config={"egress": {"resolve_overrides": overrides, "internet_access": ["internet"]}},
        extra_args=["--allow-package-registries"],
    )


def _connect(box: EgressSandbox, target: str) -> dict[str, Any]:
    return box.proxy(f"CONNECT {target} HTTP/1.1\r\nHost: {target}\r\n\r\n".encode())


def test_registry_refusal_is_immediate_and_says_how_to_allow_it(
    runtime_server: RunningServer,
) -> None:
    # runtime_server has no egress rules at all: the relay must still answer.
    box = make_sandbox(runtime_server)
    try:
        answer = _connect(box, "pypi.org:443")
        assert answer["status_line"] == f"HTTP/1.1 403 Sandgate egress: {_PYPI_FIX}", answer
        assert answer["eof"], "the proxy must end a refused CONNECT, not leave it open"
        assert _PYPI_FIX in answer["body"]
        assert answer["headers"]["x-sandgate-reason"] == "host_not_allowed"
        for target, preset in (
            ("files.pythonhosted.org:443", "pypi"),
            ("registry.npmjs.org:443", "npm"),
            ("deb.debian.org:443", "debian"),
            ("github.com:443", "github"),
        ):
            line = _connect(box, target)["status_line"]
            assert f"{target} is not allowed (allow it with egress.allow: [{preset}]" in line
        apt = box.proxy(
            b"GET http://deb.debian.org/debian/dists/bookworm/InRelease HTTP/1.1\r\n"
            b"Host: deb.debian.org\r\n\r\n"
        )
        assert (
            "[debian], or start sandgate serve with --allow-package-registries"
            in (apt["status_line"])
        )
        other = _connect(box, "example.com:443")["status_line"]
        assert other.endswith(
            '(ask the operator to allow it, e.g. egress.allow: ["example.com:443"])'
        )
        # Python's http.client (under pip, requests, urllib3) shows the CONNECT status line.
        urllib = box.shell(
            "python3 -c \"import urllib.request as u; u.urlopen('https://pypi.org/simple/', "
            'timeout=20)" 2>&1'
        )
        assert urllib.exit_code != 0
        assert f"Tunnel connection failed: 403 Sandgate egress: {_PYPI_FIX}" in urllib.stdout
    finally:
        kill(box)


def test_pip_install_without_registry_access_shows_the_fix(
    runtime_server: RunningServer,
) -> None:
    box = make_sandbox(runtime_server, templateID="code-interpreter-v1")
    try:
        pip = box.shell("pip download --no-deps --retries 1 --timeout 20 -d /tmp/dl six 2>&1")
        assert pip.exit_code != 0, pip.stdout
        assert _PYPI_FIX in pip.stdout, pip.stdout
    finally:
        kill(box)


def test_allow_package_registries_flag_opens_the_registry_presets(
    registries_server: RunningServer,
) -> None:
    assert "egress.package_registries_allowed" in registries_server.log_text()
    box = make_sandbox(registries_server, allow_internet_access=False)
    try:
        for target in (
            "pypi.org:443",
            "files.pythonhosted.org:443",
            "registry.npmjs.org:443",
            "deb.debian.org:80",
        ):
            answer = _connect(box, target)
            # Allowed by name; refused only because the test mapped it onto loopback.
            assert answer["headers"]["x-sandgate-reason"] == "resolved_to_private", answer
        for target, reason in (
            ("pypi.org:80", "port_not_allowed"),
            ("example.test:443", "host_not_allowed"),
            ("github.com:443", "host_not_allowed"),
        ):
            assert _connect(box, target)["headers"]["x-sandgate-reason"] == reason, target
        decisions = egress_decisions(registries_server, box.id)
        assert [d["rule"] for d in decisions[:4]] == [
            "allow#0:pypi",
            "allow#0:pypi",
            "allow#1:npm",
            "allow#2:debian",
        ]
    finally:
        kill(box)


def test_internet_preset_reaches_public_names_only(registries_server: RunningServer) -> None:
    box = make_sandbox(registries_server)  # the SDK default: allow_internet_access true
    try:
        for target, reason in (
            ("example.test:443", "resolved_to_private"),  # allowed; loopback refused
            ("example.test:80", "resolved_to_private"),
            ("meta.test:80", "metadata_address"),
            ("example.test:8080", "port_not_allowed"),
            ("example.test:25", "port_blocked"),
            ("93.184.215.14:443", "ip_literal"),
            ("[2606:4700::1111]:443", "ip_literal"),
        ):
            assert _connect(box, target)["headers"]["x-sandgate-reason"] == reason, target
        rules = [d["rule"] for d in egress_decisions(registries_server, box.id)[:3]]
        assert rules == ["internet_access#0:internet"] * 3
    finally:
        kill(box)


def _reported(server: RunningServer, sandbox_id: str) -> list[bool]:
    """``allowInternetAccess`` of one sandbox in GET, the v2 list and the v1 list."""
    headers = {"X-API-Key": server.api_key}
    detail = httpx.get(f"{server.url}/sandboxes/{sandbox_id}", headers=headers).json()
    values = [detail["allowInternetAccess"]]
    for path in ("/v2/sandboxes", "/sandboxes"):
        listed = httpx.get(f"{server.url}{path}", headers=headers).json()
        values += [row["allowInternetAccess"] for row in listed if row["sandboxID"] == sandbox_id]
    return values


def test_allow_internet_access_reports_what_the_sandbox_can_reach(
    runtime_server: RunningServer, registries_server: RunningServer
) -> None:
    boxes = {
        # No rules reach the internet: the SDK's default true grants nothing here.
        "offline": (make_sandbox(runtime_server, allow_internet_access=True), False),
        # The registries (the flag) are not "the internet"; internet_access is off.
        "registries_only": (make_sandbox(registries_server, allow_internet_access=False), False),
        "internet": (make_sandbox(registries_server, allow_internet_access=True), True),
        "internet_denied": (
            make_sandbox(registries_server, network={"denyOut": ["0.0.0.0/0"]}),
            False,
        ),
    }
    try:
        for name, (box, expected) in boxes.items():
            assert _reported(box.server, box.id) == [expected] * 3, name
    finally:
        for box, _ in boxes.values():
            kill(box)
