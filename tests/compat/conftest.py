"""Fixtures for the compatibility suite: the four pinned official clients and a running server.

``client`` parametrises a test over every pinned client (``py-e2b-2.31.0``, ``py-e2b-2.63.0``,
``js-e2b-2.31.0``, ``js-e2b-2.51.0``); each is installed on first use into ``.cache/compat/``
and reused while its lock file is unchanged. ``e2b_env`` is the SDK environment pointing at the
session's ``sandgate_server`` (registered by the root ``tests/conftest.py``);
``runtime_e2b_env`` points at the ``runtime`` dimension's server, so a test taking it runs on
docker and on bwrap.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.fixtures.pairing import deselect_unpaired
from tests.fixtures.server import RunningServer

from .clients import CLIENTS, PreparedClient, prepare

SERVER_LOG_TAIL_LINES = 80


@pytest.fixture(scope="session", params=[spec.name for spec in CLIENTS])
def client(request: pytest.FixtureRequest) -> PreparedClient:
    spec = next(spec for spec in CLIENTS if spec.name == request.param)
    return prepare(spec)


@pytest.fixture(scope="session")
def e2b_env(sandgate_server: RunningServer) -> dict[str, str]:
    return dict(sandgate_server.env)


@pytest.fixture(scope="session")
def runtime_e2b_env(runtime_server: RunningServer) -> dict[str, str]:
    """The SDK environment for the ``runtime`` dimension's server (docker: the shared one)."""
    return dict(runtime_server.env)


#: For scenarios whose runtime part is not what they test (a template build is the same on
#: both runtimes; only the sandbox started from it differs), each SDK pin runs on one runtime:
#: both languages reach both runtimes, and every pin's wire requests are still sent.
#: The SDKs talk to the gateway's E2B layer, which is the same above either runtime: a
#: scenario run by a Python and a JS pin on each runtime (an old and a new pin on each too)
#: proves what the runtime does, and each pin's run proves its requests and parsing, so the
#: other four pin-runtime pairs repeat both. ``test_commands_basic.py`` and
#: ``test_control_plane.py`` keep every pair (each pin on each runtime, the cross-check).
RUNTIME_OF_CLIENT = {
    "py-e2b-2.31.0": "docker",
    "py-e2b-2.63.0": "bwrap",
    "js-e2b-2.31.0": "bwrap",
    "js-e2b-2.51.0": "docker",
}


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Leaves out the other runtime of tests marked ``one_runtime_per_client``."""
    deselect_unpaired(config, items, "client", RUNTIME_OF_CLIENT, marker="one_runtime_per_client")


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    """Attaches the tail of the server's log to a failed compat test's report."""
    report = yield
    funcargs = getattr(item, "funcargs", {})
    server = funcargs.get("runtime_server") or funcargs.get("sandgate_server")
    if report.failed and isinstance(server, RunningServer):
        tail = "\n".join(server.log_text().splitlines()[-SERVER_LOG_TAIL_LINES:])
        status = server.process.poll() if server.process is not None else None
        if status is not None:
            tail += f"\n=== the server process has exited with status {status}"
        report.sections.append(("sandgate server log (tail)", tail))
    return report
