"""Runtime selection fails closed: a missing isolation feature is named, never worked around."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from sandgate.config import load_config
from sandgate.errors import RuntimeBelowFloor, RuntimeUnavailable
from sandgate.runtimes import bwrap as bwrap_module
from sandgate.runtimes import select
from sandgate.runtimes._cgroups import detect
from sandgate.runtimes._guard import FloorGuard
from sandgate.runtimes._probe import ComponentFact, HostFacts
from sandgate.runtimes.base import SandboxSpec
from sandgate.runtimes.bwrap import BwrapRuntime, Requirement
from sandgate.runtimes.docker import DockerRuntime

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


def _config(tmp_path: Path, kind: str, **env: str):  # type: ignore[no-untyped-def]
    return load_config(
        None, environ={"SANDGATE_HOME": str(tmp_path), "SANDGATE_RUNTIME": kind, **env}
    )


_KERNEL = ComponentFact("kernel", "kernel 6.18.44", "6.18.44", "6.18.44")
_OLD_KERNEL = ComponentFact("kernel", "kernel 5.15.0-105-generic", "5.15.0", "5.15.0-105-generic")
_ENGINE = (
    ComponentFact("docker", "the Docker engine", "28.2.2"),
    ComponentFact("containerd", "the Docker engine's containerd", "2.1.5"),
)
_PATCHED = HostFacts((_KERNEL, *_ENGINE, ComponentFact("runc", "runc at /usr/bin/runc", "1.3.3")))
_OLD_RUNC = ComponentFact("runc", "runc at /usr/sbin/runc", "1.1.5+ds1", "1.1.5+ds1-1+deb12u1")
_UNPATCHED = HostFacts((_KERNEL, *_ENGINE, _OLD_RUNC))
_NOVEMBER = "CVE-2025-31133, CVE-2025-52565, CVE-2025-52881"
_ACCEPT = (
    "[{component: runc, cves: [CVE-2025-31133, CVE-2025-52565, CVE-2025-52881], "
    "reason: 'waiting for the backport'}]"
)


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
    assert select.choose(_config(tmp_path, "auto"), facts=_PATCHED).kind == "docker"
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


# -- runtime floors (issue 12) ---------------------------------------------------------------


def test_auto_skips_a_docker_below_its_floors_and_says_why(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(select, "check_host", lambda: list(_OK))
    monkeypatch.setattr(select, "docker_reachable", lambda base_url="": "20.10.24+dfsg1")
    choice = select.choose(_config(tmp_path, "auto"), facts=_UNPATCHED)
    assert choice.kind == "bwrap"
    assert choice.refusal is None
    for part in (
        "Docker 20.10.24+dfsg1 answers but is below",
        "runc 1.1.5+ds1-1+deb12u1",
        _NOVEMBER,
    ):
        assert part in choice.reason, part


def test_auto_keeps_docker_when_the_risk_is_accepted(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(select, "check_host", lambda: list(_OK))
    monkeypatch.setattr(select, "docker_reachable", lambda base_url="": "20.10.24+dfsg1")
    config = _config(tmp_path, "auto", SANDGATE_RUNTIME__ACCEPT_BELOW_FLOOR=_ACCEPT)
    choice = select.choose(config, facts=_UNPATCHED)
    assert (choice.kind, choice.refusal) == ("docker", None)
    assert "accepted exceptions" in choice.reason
    assert [f.component for f in choice.floors.accepted("docker")] == ["runc"]


def test_explicit_docker_below_its_floors_is_chosen_but_refuses_creates(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(select, "docker_reachable", lambda base_url="": "20.10.24+dfsg1")
    runtime = select.select_runtime(_config(tmp_path, "docker"), "test", facts=_UNPATCHED)
    assert isinstance(runtime, FloorGuard) and isinstance(runtime.inner, DockerRuntime)
    assert runtime.name == "docker"
    spec = SandboxSpec("abc", "img", tmp_path, 1, 512, 1024, 256, 64, 1024)
    with pytest.raises(RuntimeBelowFloor) as caught:
        asyncio.run(runtime.create(spec))
    assert (caught.value.code, caught.value.status) == ("runtime_below_floor", 503)
    for part in (
        "runc 1.1.5+ds1-1+deb12u1",
        "1.2.8+, 1.3.3+ or 1.4.0-rc.3+",
        _NOVEMBER,
        "upgrade",
        "runtime.accept_below_floor",
    ):
        assert part in caught.value.message, part


def test_a_kernel_below_its_floors_refuses_on_either_runtime(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(select, "check_host", lambda: list(_OK))
    monkeypatch.setattr(select, "docker_reachable", lambda base_url="": "28.2.2")
    old = HostFacts((_OLD_KERNEL, *_ENGINE, ComponentFact("runc", "runc", "1.3.3")))
    auto = select.choose(_config(tmp_path, "auto"), facts=old)
    assert auto.kind == "docker" and "bwrap cannot replace it" in auto.reason
    assert auto.refusal is not None and "CVE-2024-1086" in auto.refusal
    monkeypatch.setattr(select, "docker_reachable", lambda base_url="": None)
    bwrap = select.choose(_config(tmp_path, "bwrap"), facts=HostFacts((_OLD_KERNEL,)))
    assert bwrap.kind == "bwrap"
    assert bwrap.refusal is not None and "kernel 5.15.0-105-generic" in bwrap.refusal


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
