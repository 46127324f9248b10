"""The services of a home are wired in one place (``sandgate.wiring``): the server's composition
root and the in-process CLI commands (``run``, ``chat``, ``mcp``) build them through it, and
those commands do so without importing the HTTP app, template builds or workflows."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import sandgate

_ROOT = Path(sandgate.__file__).parent

#: What only ``sandgate serve`` adds around the services.
_SERVER_ONLY = (
    "sandgate.api",
    "sandgate.templates",
    "sandgate.workflows.engine",
    "sandgate.workflows.runtime",
    "sandgate.workflows.service",
    "sandgate.observability.metrics",
    "fastapi",
    "dbos",
    "prometheus_client",
    "telegram",
)

#: Constructors of the services ``sandgate.wiring`` assembles; nobody else calls them.
_ASSEMBLED = (
    "build_gateway(",
    "ToolGatewayHook(",
    "TeamSecrets(",
    "VolumeService(",
    "EgressHook(",
    "Telemetry(",
    "build_sandbox_service(",
    "build_runner(",
)


def _loaded_by(module: str, packages: tuple[str, ...]) -> list[str]:
    """The loaded modules whose names start with one of ``packages`` (a package, everything
    under it) after importing ``module`` in a fresh interpreter."""
    code = (
        "import json, sys\n"
        f"import {module}\n"
        f"print(json.dumps(sorted(m for m in sys.modules if m.startswith({packages!r}))))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout
    return list(json.loads(out))


def test_the_services_wiring_imports_nothing_only_the_server_needs() -> None:
    assert _loaded_by("sandgate.wiring", _SERVER_ONLY) == []


def test_in_process_commands_use_the_wiring_not_the_http_app() -> None:
    for command in ("run", "chat", "mcp"):
        source = (_ROOT / "cli" / f"{command}.py").read_text()
        assert "open_services(" in source, command
        assert "sandgate.api.app" not in source, command
        assert "create_app" not in source, command


def test_each_service_is_assembled_in_one_place() -> None:
    """Serve's composition root gets the services from ``build_services`` and constructs none
    of them itself, so a hook or an observer added there reaches the CLI commands too."""
    wiring = (_ROOT / "wiring.py").read_text()
    app = (_ROOT / "api" / "app.py").read_text()
    assert "build_services(" in app
    for constructor in _ASSEMBLED:
        assert constructor in wiring, constructor
        assert not re.search(rf"(?<![\w.]){re.escape(constructor)}", app), constructor


def test_the_cli_starts_without_the_docker_sdk_or_the_template_builders() -> None:
    """Every `sandgate` command loads the CLI app (all commands register at start): the Docker
    SDK (and `requests` under it) and the template builders load only in the commands that
    use them, so `sandgate approvals list` on a bwrap host pays for none of them."""
    heavy = ("docker", "requests", "sandgate.templates._builder", "sandgate.templates._docker")
    assert _loaded_by("sandgate.cli._app", heavy) == []


def test_a_server_without_channels_does_not_load_the_bot_api_client() -> None:
    assert _loaded_by("sandgate.api.app", ("telegram",)) == []
