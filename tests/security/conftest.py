"""Sandboxes shared by the tests of one module: the target, and a neighbour that must keep
working while the target is attacked."""

from collections.abc import Iterator

import pytest

from tests.fixtures.server import RunningServer, ServerFactory
from tests.framework.sandbox_http import SandboxHttp, open_sandbox

#: The disk of ``small_disk_sbx``'s sandboxes, in MiB; uploads may be larger (up to 512 MiB),
#: so what stops a big one is the disk, not the upload limit.
SMALL_DISK_MIB = 64


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


@pytest.fixture(scope="module")
def small_disk_sbx(sandgate_server_factory: ServerFactory) -> Iterator[SandboxHttp]:
    server = sandgate_server_factory(
        config={"limits": {"disk_mib": SMALL_DISK_MIB, "max_upload_mib": 512}}
    )
    sandbox = open_sandbox(server.url, server.api_key)
    yield sandbox
    sandbox.kill()
