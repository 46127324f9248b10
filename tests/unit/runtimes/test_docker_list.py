"""``DockerRuntime.list`` cleans the stages of sandboxes whose containers are gone, and never
the stage of a create in flight, even one that starts while the engine's listing is taken
(the engine then answered a create 503 "bind source path does not exist")."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from sandgate.runtimes import docker as docker_runtime
from sandgate.runtimes.docker import DockerRuntime


def _runtime(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, stages: dict[str, str]) -> Any:
    """A runtime whose host has the given stages (id -> owning instance), whose engine lists
    no container, and which records the stages it cleans instead of touching the host."""
    runtime = DockerRuntime("me", state_dir=tmp_path / "docker", rootfs_dir=tmp_path / "rootfs")
    cleaned: list[str] = []
    monkeypatch.setattr(docker_runtime, "staged", lambda: iter(list(stages)))
    monkeypatch.setattr(
        docker_runtime,
        "read_info",
        lambda sandbox_id: {"instance": stages[sandbox_id], "runtime": "docker"},
    )
    monkeypatch.setattr(runtime, "_cleanup", cleaned.append)
    runtime.cleaned = cleaned
    return runtime


def test_orphaned_stages_of_this_instance_only_are_cleaned(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    runtime = _runtime(tmp_path, monkeypatch, {"gone": "me", "other": "someone-else"})

    async def no_containers(func: Any) -> list[dict[str, Any]]:
        return []

    monkeypatch.setattr(runtime, "_call", no_containers)
    assert asyncio.run(runtime.list()) == []
    assert runtime.cleaned == ["gone"]


def test_a_create_starting_during_the_listing_keeps_its_stage(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    stages: dict[str, str] = {}
    runtime = _runtime(tmp_path, monkeypatch, stages)

    async def listing_while_a_create_stages(func: Any) -> list[dict[str, Any]]:
        # The engine's listing is taken; meanwhile a create begins and stages its sandbox,
        # and is still in flight (or just done) when list looks at the stages.
        with runtime._in_creation("racing"):
            stages["racing"] = "me"
        return []

    monkeypatch.setattr(runtime, "_call", listing_while_a_create_stages)
    asyncio.run(runtime.list())
    assert runtime.cleaned == []
    assert runtime._list_watches == []

    async def nothing(func: Any) -> list[dict[str, Any]]:
        return []

    monkeypatch.setattr(runtime, "_call", nothing)
    asyncio.run(runtime.list())  # the next listing: no create in flight, no container
    assert runtime.cleaned == ["racing"]
