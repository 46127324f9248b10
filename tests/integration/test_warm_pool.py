"""The warm pool: claimed sandboxes get their own environment; the pool refills and is
removed when the server stops."""

from __future__ import annotations

import json
import time

import docker
import pytest

from tests.fixtures.server import ServerFactory
from tests.framework.envd import create, run

pytestmark = pytest.mark.docker


def _instance_containers(home_instance: str) -> list[str]:
    client = docker.from_env()
    found = client.containers.list(
        all=True, filters={"label": f"sandgate.instance={home_instance}"}
    )
    return [c.labels["sandgate.sandbox"] for c in found]


def _wait(condition, what: str, timeout: float = 60) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.1)


def test_claimed_sandbox_is_configured_and_pool_refills(
    sandgate_server_factory: ServerFactory,
) -> None:
    server = sandgate_server_factory(extra_env={"SANDGATE_TEMPLATES__WARM_POOL": "{base: 1}"})
    instance = (server.home / "instance-id").read_text().strip()
    _wait(lambda: len(_instance_containers(instance)) == 1, "the pool to fill")
    pooled = _instance_containers(instance)[0]

    created = create(server.url, server.api_key, envVars={"WHO": "claimed"}, metadata={"m": "1"})
    assert created["sandboxID"] == pooled, "the pooled sandbox is handed out"
    result = run(
        server.url,
        pooled,
        created["envdAccessToken"],
        "echo $WHO; id -un; cat /run/sandgate/envs.json",
    )
    who, user, published = result.stdout.split("\n", 2)
    assert (who, user) == ("claimed", "user")
    assert json.loads(published)["WHO"] == "claimed", "services inside read envs.json"

    _wait(lambda: len(_instance_containers(instance)) == 2, "the pool to refill")
    server.stop()
    assert _instance_containers(instance) == [pooled], "stop removes unclaimed pool sandboxes"
    server.start()
    again = run(server.url, pooled, created["envdAccessToken"], "echo back")
    assert again.stdout == "back\n"
