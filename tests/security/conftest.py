"""Sandboxes shared by the tests of one module: the target, and a neighbour that must keep
working while the target is attacked."""

from collections.abc import Iterator

import pytest

from tests.fixtures.server import RunningServer
from tests.framework.sandbox_http import SandboxHttp, open_sandbox


@pytest.fixture(scope="module")
def sbx(sandgate_server: RunningServer) -> Iterator[SandboxHttp]:
    sandbox = open_sandbox(sandgate_server.url, sandgate_server.api_key)
    yield sandbox
    sandbox.kill()


@pytest.fixture(scope="module")
def neighbour(sandgate_server: RunningServer) -> Iterator[SandboxHttp]:
    sandbox = open_sandbox(sandgate_server.url, sandgate_server.api_key)
    yield sandbox
    sandbox.kill()
