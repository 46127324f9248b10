"""The warm pool, on docker and on bwrap: claimed sandboxes get their own environment; the pool
refills and is removed when the server stops; a burst the size of the pool is served entirely
from it, and the pool comes back to size."""

from __future__ import annotations

import json
import re
import threading
import time
from typing import Any

import docker
import httpx

from tests.fixtures.server import RunningServer
from tests.framework.envd import create, run


def _pooled(runtime: str, server: RunningServer) -> list[str]:
    """Sandboxes of this server that the runtime started (rows or not), in no order."""
    if runtime == "docker":
        instance = (server.home / "instance-id").read_text().strip()
        # The list alone (no inspect per container): one removed between the two (a boot
        # discarded) must not fail the count.
        found = docker.from_env().api.containers(
            all=True, filters={"label": f"sandgate.instance={instance}"}
        )
        return [c["Labels"]["sandgate.sandbox"] for c in found]
    started = []
    for state in (server.home / "bwrap").glob("*/state.json"):
        try:
            if json.loads(state.read_text()).get("started"):
                started.append(state.parent.name)
        except (OSError, ValueError):
            continue  # being written or removed right now
    return started


def _wait(condition, what: str, timeout: float = 120) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.1)


def _waiting(server: RunningServer) -> int:
    """The pool's own count of booted, answering sandboxes (``/metrics``)."""
    text = httpx.get(f"{server.url}/metrics", timeout=30).text
    found = re.search(r'^sandgate_warm_pool_sandboxes\{template="base"\} (\S+)$', text, re.M)
    return int(float(found.group(1))) if found else 0


def test_claimed_sandbox_is_configured_and_pool_refills(
    runtime: str, runtime_server_factory: Any
) -> None:
    server = runtime_server_factory(
        extra_env={
            "SANDGATE_TEMPLATES__WARM_POOL": "{base: 1}",
            "SANDGATE_OBSERVABILITY__PROMETHEUS": "true",
        }
    )
    # The pool's own count, not the runtime's: a sandbox the runtime has started may still be
    # booting, and a create then rightly starts another instead of waiting for it.
    _wait(lambda: _waiting(server) == 1, "the pool to fill")
    (pooled,) = _pooled(runtime, server)

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

    _wait(lambda: len(_pooled(runtime, server)) == 2, "the pool to refill")
    server.stop()
    assert _pooled(runtime, server) == [pooled], "stop removes unclaimed pool sandboxes"
    server.start()
    again = run(server.url, pooled, created["envdAccessToken"], "echo back")
    assert again.stdout == "back\n"


def test_a_burst_the_size_of_the_pool_is_served_from_it_and_the_pool_refills(
    runtime: str, runtime_server_factory: Any
) -> None:
    size = 4
    pool = f"{{base: {{min: {size}, max: {size}}}}}"
    server = runtime_server_factory(
        extra_env={
            "SANDGATE_TEMPLATES__WARM_POOL": pool,
            "SANDGATE_OBSERVABILITY__PROMETHEUS": "true",
        }
    )
    _wait(lambda: _waiting(server) == size, "the pool to fill")
    waiting = set(_pooled(runtime, server))
    assert len(waiting) == size

    barrier = threading.Barrier(size)
    claimed: list[str] = []
    errors: list[BaseException] = []

    def one() -> None:
        barrier.wait()
        try:
            sandbox = create(server.url, server.api_key)
            result = run(server.url, sandbox["sandboxID"], sandbox["envdAccessToken"], "true")
            assert result.exit_code == 0
            claimed.append(sandbox["sandboxID"])
        except BaseException as exc:  # reported below, with the others
            errors.append(exc)

    threads = [threading.Thread(target=one) for _ in range(size)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    assert set(claimed) == waiting, "every create of the burst took a waiting sandbox"

    _wait(lambda: _waiting(server) == size, "the pool to refill to size")
    assert len(set(_pooled(runtime, server)) - waiting) == size, "four new ones wait"
