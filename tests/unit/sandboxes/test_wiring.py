"""Operator commands on the host manage sandboxes without building the HTTP app: the
lifecycle service is wired in one module that imports none of the server's other parts."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

#: What ``sandgate serve`` adds around the lifecycle; a kill from the CLI needs none of it.
_SERVER_ONLY = (
    "sandgate.api",
    "sandgate.tools",
    "sandgate.workflows",
    "sandgate.agents",
    "sandgate.egress",
    "sandgate.templates",
    "fastapi",
    "starlette",
    "dbos",
)


def test_the_sandbox_wiring_imports_nothing_of_the_server() -> None:
    code = (
        "import json, sys\n"
        "import sandgate.sandboxes.wiring\n"
        f"print(json.dumps(sorted(m for m in sys.modules if m.startswith({_SERVER_ONLY!r}))))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout
    assert json.loads(out) == []


def test_serve_and_the_cli_build_the_service_the_same_way() -> None:
    """The services' wiring (used by serve and the in-process CLI commands) builds its
    SandboxService through the same function (one place decides the instance id and the
    guest zipapp), and the composition root builds none itself."""
    import sandgate

    root = Path(sandgate.__file__).parent
    services = (root / "wiring.py").read_text()
    assert "build_sandbox_service(" in services
    for source in (services, (root / "api" / "app.py").read_text()):
        assert "SandboxService(" not in source.replace("build_sandbox_service(", "")
        assert "def instance_id" not in source
