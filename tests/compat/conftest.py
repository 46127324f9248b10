"""Fixtures for the compatibility suite: the four pinned official clients and a running server.

``client`` parametrises a test over every pinned client (``py-e2b-2.31.0``, ``py-e2b-2.63.0``,
``js-e2b-2.31.0``, ``js-e2b-2.51.0``); each is installed on first use into ``.cache/compat/``
and reused while its lock file is unchanged. ``e2b_env`` is the SDK environment pointing at the
session's ``sandgate_server`` (registered by the root ``tests/conftest.py``).
"""

from __future__ import annotations

import pytest

from tests.fixtures.server import RunningServer

from .clients import CLIENTS, PreparedClient, prepare


@pytest.fixture(scope="session", params=[spec.name for spec in CLIENTS])
def client(request: pytest.FixtureRequest) -> PreparedClient:
    spec = next(spec for spec in CLIENTS if spec.name == request.param)
    return prepare(spec)


@pytest.fixture(scope="session")
def e2b_env(sandgate_server: RunningServer) -> dict[str, str]:
    return dict(sandgate_server.env)
