"""Suite-wide fixtures. Organised as a ladder: server → sandbox → running command.

The server fixtures live in tests/fixtures/server.py; every test directory can use them.
"""

from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from tests.fixtures import shared_tls
from tests.fixtures.runtimes import (
    runtime,
    runtime_sandbox,
    runtime_server,
    runtime_server_factory,
    runtime_view,
)
from tests.fixtures.server import RunningServer, sandgate_server, sandgate_server_factory
from tests.framework.envd import create

shared_tls.install()

__all__ = [
    "runtime",
    "runtime_sandbox",
    "runtime_server",
    "runtime_server_factory",
    "runtime_view",
    "sandbox",
    "sandgate_server",
    "sandgate_server_factory",
]


@pytest.fixture
def sandbox(sandgate_server: RunningServer) -> Iterator[dict[str, Any]]:
    """A running ``base`` sandbox on the shared server (killed afterwards)."""
    created = create(sandgate_server.url, sandgate_server.api_key, timeout=300)
    yield created
    httpx.delete(
        f"{sandgate_server.url}/sandboxes/{created['sandboxID']}",
        headers={"X-API-Key": sandgate_server.api_key},
    )


def pytest_xdist_make_scheduler(config: Any, log: Any) -> Any:
    """With ``--dist loadscope`` (scripts/test), long parametrised modules are shared among
    workers by runtime and client pin (tests/fixtures/scheduling.py)."""
    if config.getoption("dist") != "loadscope":
        return None
    from tests.fixtures.scheduling import make_scheduler

    return make_scheduler(config, log)
