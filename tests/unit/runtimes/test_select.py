"""Runtime selection fails closed: a missing isolation feature is named, never worked around."""

from __future__ import annotations

from pathlib import Path

import pytest

from sandgate.config import load_config
from sandgate.errors import RuntimeUnavailable
from sandgate.runtimes import bwrap as bwrap_module
from sandgate.runtimes import select
from sandgate.runtimes._cgroups import detect
from sandgate.runtimes.bwrap import BwrapRuntime, Requirement

_OK = [
    Requirement("bubblewrap", True, "/usr/bin/bwrap 0.8.0"),
    Requirement("root", True, "running as root"),
]
_USERNS_BLOCKED = Requirement(
    "user namespaces",
    False,
    "blocked (setting up uid map: Permission denied)",
    "sysctl -w kernel.apparmor_restrict_unprivileged_userns=0",
)


def _config(tmp_path: Path, kind: str):  # type: ignore[no-untyped-def]
    return load_config(None, environ={"SANDGATE_HOME": str(tmp_path), "SANDGATE_RUNTIME": kind})


@pytest.mark.parametrize("kind", ["auto", "bwrap"])
def test_missing_bwrap_feature_refuses_with_feature_and_fix(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, kind: str
) -> None:
    monkeypatch.setattr(select, "docker_reachable", lambda base_url="": None)
    monkeypatch.setattr(select, "check_host", lambda: [*_OK, _USERNS_BLOCKED])
    with pytest.raises(RuntimeUnavailable) as caught:
        select.select_runtime(_config(tmp_path, kind), "test")
    message = caught.value.message
    assert "user namespaces" in message
    assert "apparmor_restrict_unprivileged_userns" in message
    assert "none are started" in message


def test_auto_prefers_docker_and_falls_back_to_bwrap(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(select, "check_host", lambda: list(_OK))
    monkeypatch.setattr(select, "docker_reachable", lambda base_url="": "27.0.0")
    assert select.choose(_config(tmp_path, "auto")).kind == "docker"
    monkeypatch.setattr(select, "docker_reachable", lambda base_url="": None)
    choice = select.choose(_config(tmp_path, "auto"))
    assert choice.kind == "bwrap" and "Docker is absent" in choice.reason
    runtime = select.select_runtime(_config(tmp_path, "auto"), "test")
    assert isinstance(runtime, BwrapRuntime)


def test_docker_kind_never_falls_back(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(select, "docker_reachable", lambda base_url="": None)
    monkeypatch.setattr(select, "check_host", lambda: list(_OK))
    with pytest.raises(RuntimeUnavailable, match="no Docker engine answers"):
        select.select_runtime(_config(tmp_path, "docker"), "test")


def test_create_refuses_when_a_feature_disappears(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import asyncio

    from sandgate.runtimes.base import SandboxSpec

    monkeypatch.setattr(bwrap_module, "check_host", lambda: [*_OK, _USERNS_BLOCKED])
    runtime = BwrapRuntime("test", home=tmp_path)
    spec = SandboxSpec("abc", "img", tmp_path, 1, 512, 1024, 256, 64, 1024)
    with pytest.raises(RuntimeUnavailable, match="user namespaces"):
        asyncio.run(runtime.create(spec))
    assert not (tmp_path / "bwrap" / "abc").exists()


V1 = """\
30 25 0:26 / /sys/fs/cgroup/memory rw,nosuid - cgroup cgroup rw,memory
31 25 0:27 / /sys/fs/cgroup/pids rw,nosuid - cgroup cgroup rw,pids
32 25 0:28 / /sys/fs/cgroup/cpu,cpuacct rw,nosuid - cgroup cgroup rw,cpu,cpuacct
33 25 0:29 / /sys/fs/cgroup/unified rw,nosuid - cgroup2 cgroup2 rw
"""


def test_cgroup_v1_without_freezer_is_reported_missing() -> None:
    host = detect(V1)
    assert host.version == 1
    assert host.mounts["cpu"] == Path("/sys/fs/cgroup/cpu,cpuacct")
    assert host.missing == ("freezer",)


def test_cgroup_v2_is_detected() -> None:
    host = detect("40 1 0:30 / /sys/fs/cgroup rw - cgroup2 cgroup2 rw,nsdelegate\n")
    assert host.version == 2
