"""Runtime floors (issue 12, class 6): the reviewed floor list, how each kind of version is
judged against it, and how an operator's exceptions accept exactly what they name."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import date
from pathlib import Path
from typing import Any

import pytest

from sandgate.config import FloorException
from sandgate.errors import ConfigError
from sandgate.runtimes._probe import AUTHZ_PLUGINS, ComponentFact, HostFacts, kernel_fact
from sandgate.runtimes.floors import (
    FLOORS_PATH,
    Finding,
    FloorReport,
    Floors,
    FloorStatus,
    evaluate,
)

SHIPPED = Floors.load()
NOVEMBER_2025 = ("CVE-2025-31133", "CVE-2025-52565", "CVE-2025-52881")
TODAY = date(2026, 12, 1)


def _runc(version: str, build: str | None = None) -> ComponentFact:
    return ComponentFact("runc", "runc at /usr/sbin/runc", version, build)


def _report(
    *facts: ComponentFact,
    exceptions: Sequence[FloorException] = (),
    conditions: frozenset[str] = frozenset(),
    floors: Floors = SHIPPED,
) -> FloorReport:
    return evaluate(HostFacts(facts, conditions), floors, exceptions, today=TODAY)


def _finding(report: FloorReport, floor_id: str) -> Finding:
    (found,) = [f for f in report.findings if f.floor.id == floor_id]
    return found


def _exception(component: str, *cves: str, **extra: Any) -> FloorException:
    return FloorException.model_validate(
        {"component": component, "cves": list(cves), "reason": "test", **extra}
    )


# -- the shipped list ---------------------------------------------------------------------------


def test_shipped_list_names_cves_and_sources_for_every_floor() -> None:
    assert SHIPPED.floors, "the reviewed list is empty"
    for floor in SHIPPED.floors:
        assert floor.sources, floor.id
        assert floor.cves or floor.component == "bubblewrap", f"{floor.id}: no CVE"
        if not floor.enforced:
            assert floor.note, f"{floor.id}: not enforced without saying why"
    november = next(f for f in SHIPPED.floors if set(NOVEMBER_2025) <= set(f.cves))
    assert (november.component, november.fixed) == ("runc", ("1.2.8", "1.3.3", "1.4.0-rc.3"))
    kernel_cves = {cve for f in SHIPPED.for_component("kernel") for cve in f.cves}
    assert {"CVE-2022-0847", "CVE-2022-0492", "CVE-2024-1086"} <= kernel_cves
    assert any("CVE-2024-41110" in f.cves for f in SHIPPED.for_component("docker"))
    assert FLOORS_PATH.name == "runtime-floors.yaml"


# -- upstream releases --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("version", "floor_id", "status"),
    [
        ("1.2.8", "runc-2025-11-mount-races", FloorStatus.OK),
        ("1.2.7", "runc-2025-11-mount-races", FloorStatus.BELOW),
        ("1.3.2", "runc-2025-11-mount-races", FloorStatus.BELOW),
        ("1.3.3", "runc-2025-11-mount-races", FloorStatus.OK),
        ("1.4.0-rc.2", "runc-2025-11-mount-races", FloorStatus.BELOW),
        ("1.4.0-rc.3", "runc-2025-11-mount-races", FloorStatus.OK),
        ("1.4.0", "runc-2025-11-mount-races", FloorStatus.OK),
        ("v1.5.1", "runc-2025-11-mount-races", FloorStatus.OK),  # a newer branch
        ("1.1.15", "runc-2025-11-mount-races", FloorStatus.BELOW),  # an older branch, no fix
        ("1.1.11", "runc-leaky-vessels", FloorStatus.BELOW),
        ("1.1.12", "runc-leaky-vessels", FloorStatus.OK),
        ("1.0.0-rc5", "runc-exe-overwrite", FloorStatus.BELOW),
        ("1.0.0-rc95", "runc-exe-overwrite", FloorStatus.OK),
        ("1.2.8", "runc-2026-dev-symlink", FloorStatus.ADVISORY),  # shown, not enforced
    ],
)
def test_upstream_runc_against_each_floor(version: str, floor_id: str, status: FloorStatus) -> None:
    assert _finding(_report(_runc(version)), floor_id).status is status


# -- distribution builds ------------------------------------------------------------------------


def test_debian_bookworm_runc_is_patched_for_leaky_vessels_only() -> None:
    report = _report(_runc("1.1.5+ds1", "1.1.5+ds1-1+deb12u1"))
    assert _finding(report, "runc-leaky-vessels").status is FloorStatus.OK
    november = _finding(report, "runc-2025-11-mount-races")
    assert november.status is FloorStatus.BELOW
    assert november.open_cves == NOVEMBER_2025
    assert november.found == "1.1.5+ds1-1+deb12u1"
    assert [f.component for f in report.blocking("docker")] == ["runc"]
    assert report.blocking("bwrap") == ()


def test_debian_trixie_backport_leaves_only_the_cve_it_lacks_open() -> None:
    report = _report(_runc("1.1.15+ds1", "1.1.15+ds1-2+deb13u1"))
    november = _finding(report, "runc-2025-11-mount-races")
    assert november.status is FloorStatus.BELOW
    assert november.open_cves == ("CVE-2025-52881",)
    assert "CVE-2025-31133, CVE-2025-52565 only" in november.detail
    assert _finding(report, "runc-2026-dev-symlink").status is FloorStatus.OK


def test_debian_forky_upstream_release_passes_everything() -> None:
    report = _report(_runc("1.3.6+ds1", "1.3.6+ds1-1"))
    assert {f.status for f in report.findings} == {FloorStatus.OK}


def test_a_later_bookworm_security_update_keeps_the_listed_fixes() -> None:
    later = _report(_runc("1.1.5+ds1", "1.1.5+ds1-1+deb12u2"))
    assert _finding(later, "runc-leaky-vessels").status is FloorStatus.OK
    unstable = _report(_runc("1.1.5+ds1", "1.1.5+ds1-2"))  # not the security series
    assert _finding(unstable, "runc-leaky-vessels").status is FloorStatus.BELOW


def test_a_distribution_look_is_never_taken_as_a_fix() -> None:
    # A Debian-looking build of a vulnerable upstream that nobody listed stays below.
    report = _report(_runc("1.1.11", "1.1.11+ds1-1+deb12u7"))
    assert _finding(report, "runc-leaky-vessels").status is FloorStatus.BELOW


def test_package_lookup_is_asked_only_when_it_can_change_the_verdict() -> None:
    asked: list[str] = []

    def lookup(binary: str) -> str | None:
        asked.append(binary)
        return {"/usr/sbin/dockerd": "20.10.24+dfsg1-1+deb12u1+b6"}.get(binary)

    engine = ComponentFact(
        "docker", "the Docker engine", "20.10.24+dfsg1", binary="/usr/sbin/dockerd"
    )
    quiet = evaluate(HostFacts((engine,)), SHIPPED, today=TODAY, lookup_build=lookup)
    assert asked == [], "no AuthZ plugins: the Docker floors do not apply, nothing to look up"
    assert {f.status for f in quiet.findings} == {FloorStatus.NOT_AFFECTED}

    authz = evaluate(
        HostFacts((engine,), frozenset({AUTHZ_PLUGINS})), SHIPPED, today=TODAY, lookup_build=lookup
    )
    assert "/usr/sbin/dockerd" in asked
    assert _finding(authz, "docker-authz-zero-length").status is FloorStatus.OK
    assert _finding(authz, "docker-authz-zero-length").found == "20.10.24+dfsg1-1+deb12u1+b6"
    assert _finding(authz, "docker-authz-oversized-body").status is FloorStatus.BELOW


def test_a_looked_up_package_of_another_version_is_not_this_build() -> None:
    engine = ComponentFact("docker", "the Docker engine", "20.10.24", binary="/usr/sbin/dockerd")
    report = evaluate(
        HostFacts((engine,), frozenset({AUTHZ_PLUGINS})),
        SHIPPED,
        today=TODAY,
        lookup_build=lambda _: "20.10.5+dfsg1-1+deb12u1",
    )
    finding = _finding(report, "docker-authz-zero-length")
    assert finding.status is FloorStatus.BELOW
    assert finding.build is None


# -- kernels ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("release", "uname_version", "signature", "expected"),
    [
        ("6.18.44-fc-v669", "#1 SMP PREEMPT_DYNAMIC @0", None, ("ok", "ok", "ok")),
        # Ubuntu without its signature file: "5.15.0" is all the release says.
        ("5.15.0-105-generic", "#115-Ubuntu SMP", None, ("below", "below", "below")),
        (
            "5.15.0-105-generic",
            "#115-Ubuntu SMP",
            "Ubuntu 5.15.0-105.115-generic 5.15.148",
            ("ok", "ok", "below"),  # based on 5.15.148; CVE-2024-1086 was fixed in 5.15.149
        ),
        (
            "6.1.0-18-amd64",
            "#1 SMP PREEMPT_DYNAMIC Debian 6.1.76-1 (2024-02-01)",
            None,
            ("ok", "ok", "ok"),
        ),
        (
            "6.1.0-17-amd64",
            "#1 SMP PREEMPT_DYNAMIC Debian 6.1.69-1 (2023-12-30)",
            None,
            ("ok", "ok", "below"),
        ),
        ("4.19.0", "#1 SMP", None, ("not_affected", "below", "below")),
        ("5.11.3-custom", "#1 SMP", None, ("below", "below", "below")),  # branch without backports
        ("5.17.0-rc2", "#1 SMP", None, ("below", "below", "below")),  # before 5.17's fixes
    ],
)
def test_kernel_versions_with_distribution_and_local_suffixes(
    release: str, uname_version: str, signature: str | None, expected: tuple[str, str, str]
) -> None:
    report = _report(kernel_fact(release, uname_version, signature))
    found = tuple(
        _finding(report, floor_id).status.value
        for floor_id in (
            "kernel-dirty-pipe",
            "kernel-cgroup-release-agent",
            "kernel-nf-tables-verdict",
        )
    )
    assert found == expected


def test_kernel_below_blocks_both_runtimes() -> None:
    report = _report(kernel_fact("5.15.0-105-generic", "#115-Ubuntu SMP", None))
    assert report.blocking("docker") and report.blocking("bwrap")
    assert report.blocking("docker") == report.blocking("bwrap")


def test_a_listed_kernel_build_passes_by_its_exact_release() -> None:
    floors = Floors.parse(
        {
            "floors": [
                {
                    "id": "k",
                    "component": "kernel",
                    "cves": ["CVE-2024-1086"],
                    "summary": "s",
                    "fixed": ["5.15.149"],
                    "sources": ["x"],
                }
            ],
            "distro_builds": [
                {
                    "component": "kernel",
                    "build": "5.15.0-105-generic",
                    "fixes": ["CVE-2024-1086"],
                    "source": "USN",
                }
            ],
        },
        "test",
    )
    listed = _report(kernel_fact("5.15.0-105-generic", "#115-Ubuntu", None), floors=floors)
    other = _report(kernel_fact("5.15.0-104-generic", "#114-Ubuntu", None), floors=floors)
    assert [f.status for f in listed.findings] == [FloorStatus.OK]
    assert [f.status for f in other.findings] == [FloorStatus.BELOW]


# -- unreadable versions, conditions, feature floors ---------------------------------------------


@pytest.mark.parametrize("version", ["", "dev", "unknown"])
def test_an_unreadable_version_is_below_not_trusted(version: str) -> None:
    finding = _finding(_report(_runc(version)), "runc-2025-11-mount-races")
    assert finding.status is FloorStatus.BELOW
    assert finding.open_cves == NOVEMBER_2025
    assert "reports no version Sandgate can read" in finding.problem()


def test_docker_authz_floors_apply_only_with_authz_plugins() -> None:
    engine = ComponentFact("docker", "the Docker engine", "26.0.1")
    assert {f.status for f in _report(engine).findings} == {FloorStatus.NOT_AFFECTED}
    with_plugins = _report(engine, conditions=frozenset({AUTHZ_PLUGINS}))
    assert _finding(with_plugins, "docker-authz-zero-length").status is FloorStatus.BELOW
    assert [f.component for f in with_plugins.blocking("docker")] == ["docker", "docker"]


def test_a_feature_floor_cannot_be_accepted() -> None:
    bwrap = ComponentFact("bubblewrap", "bubblewrap at /usr/bin/bwrap", "0.7.0")
    report = _report(bwrap, exceptions=[_exception("bubblewrap", "CVE-2017-5226")])
    features = _finding(report, "bubblewrap-features")
    assert features.status is FloorStatus.BELOW
    assert "which Sandgate needs" in features.problem()
    assert report.state("bwrap") == "below"


# -- exceptions ---------------------------------------------------------------------------------


BOOKWORM_RUNC = _runc("1.1.5+ds1", "1.1.5+ds1-1+deb12u1")


def test_accepting_every_open_cve_makes_it_accepted_not_ok() -> None:
    exception = _exception("runc", *NOVEMBER_2025)
    report = _report(BOOKWORM_RUNC, exceptions=[exception])
    november = _finding(report, "runc-2025-11-mount-races")
    assert november.status is FloorStatus.ACCEPTED
    assert november.accepted_by == (exception,)
    assert report.blocking("docker") == ()
    assert report.accepted("docker") == (november,)
    assert (report.state("docker"), report.refusal("docker")) == ("accepted", None)


def test_accepting_part_of_the_cves_refuses_for_the_rest() -> None:
    report = _report(BOOKWORM_RUNC, exceptions=[_exception("runc", *NOVEMBER_2025[:2])])
    november = _finding(report, "runc-2025-11-mount-races")
    assert november.status is FloorStatus.BELOW
    assert november.open_cves == ("CVE-2025-52881",)
    refusal = report.refusal("docker")
    assert refusal is not None
    assert "CVE-2025-52881" in refusal and "CVE-2025-31133" not in refusal


def test_an_exception_for_another_component_accepts_nothing_and_is_reported_unused() -> None:
    wrong = _exception("containerd", *NOVEMBER_2025)
    report = _report(BOOKWORM_RUNC, exceptions=[wrong])
    assert _finding(report, "runc-2025-11-mount-races").status is FloorStatus.BELOW
    assert [cve for _, cve in report.unused] == list(NOVEMBER_2025)


def test_an_exception_for_a_fixed_cve_is_reported_unused() -> None:
    report = _report(
        BOOKWORM_RUNC, exceptions=[_exception("runc", "CVE-2024-21626", *NOVEMBER_2025)]
    )
    assert [cve for _, cve in report.unused] == ["CVE-2024-21626"]


def test_an_expired_exception_no_longer_applies() -> None:
    expired = _exception("runc", *NOVEMBER_2025, expires="2026-11-30")
    report = _report(BOOKWORM_RUNC, exceptions=[expired])
    assert _finding(report, "runc-2025-11-mount-races").status is FloorStatus.BELOW
    assert report.expired == (expired,)
    still = _report(
        BOOKWORM_RUNC, exceptions=[_exception("runc", *NOVEMBER_2025, expires="2026-12-01")]
    )
    assert still.state("docker") == "accepted"


def test_the_refusal_names_component_version_floor_cves_and_fix() -> None:
    refusal = _report(BOOKWORM_RUNC).refusal("docker")
    assert refusal is not None
    for part in (
        "runc 1.1.5+ds1-1+deb12u1",
        "runc at /usr/sbin/runc",
        "1.2.8+, 1.3.3+ or 1.4.0-rc.3+",
        *NOVEMBER_2025,
        "upgrade",
        "runtime.accept_below_floor",
    ):
        assert part in refusal, part


# -- the floor list's own validation -----------------------------------------------------------


def _floor(**overrides: Any) -> dict[str, Any]:
    return {
        "id": "x",
        "component": "runc",
        "cves": ["CVE-2099-0001"],
        "summary": "s",
        "fixed": ["99.0.0"],
        "sources": ["test"],
        **overrides,
    }


@pytest.mark.parametrize(
    ("document", "message"),
    [
        ({"floors": [_floor(fixed=["soon"])]}, "floors.0.fixed"),
        ({"floors": [_floor(fixed=["1.2.8", "1.2.9"])]}, "one fixed release per branch"),
        ({"floors": [_floor(component="crun")]}, "floors.0.component"),
        ({"floors": [_floor(sources=[])]}, "floors.0.sources"),
        ({"floors": [_floor(), _floor()]}, "repeats a floor id"),
        ({"floors": [_floor(surprise=1)]}, "floors.0.surprise"),
        (
            {
                "floors": [_floor()],
                "distro_builds": [
                    {"component": "runc", "build": "1-1", "fixes": ["CVE-2099-0002"], "source": "s"}
                ],
            },
            "CVE-2099-0002, which no runc floor names",
        ),
    ],
)
def test_a_bad_floor_document_is_refused_with_the_entry(
    document: dict[str, Any], message: str
) -> None:
    with pytest.raises(ConfigError, match=message):
        Floors.parse(document, "test")


def test_extra_floors_add_to_the_shipped_list(tmp_path: Path) -> None:
    extra = tmp_path / "floors.yaml"
    extra.write_text(
        "floors:\n  - {id: x, component: runc, cves: [CVE-2099-0001], "
        "summary: s, fixed: ['99.0.0'], sources: [test]}\n"
    )
    floors = Floors.load(extra)
    assert len(floors.floors) == len(SHIPPED.floors) + 1
    assert floors.builds == SHIPPED.builds
    report = _report(_runc("1.3.6"), floors=floors)
    assert [f.floor.id for f in report.blocking("docker")] == ["x"]


def test_extra_floors_cannot_allow_list_builds_or_replace_shipped_floors(tmp_path: Path) -> None:
    builds = tmp_path / "builds.yaml"
    builds.write_text(
        "floors:\n  - {id: x, component: runc, cves: [CVE-2099-0001], summary: s, "
        "fixed: ['99.0.0'], sources: [test]}\n"
        "distro_builds:\n  - {component: runc, build: '1.1.5+ds1-1', fixes: [CVE-2099-0001], "
        "source: me}\n"
    )
    with pytest.raises(ConfigError, match="may add floors only"):
        Floors.load(builds)
    clash = tmp_path / "clash.yaml"
    clash.write_text(
        "floors:\n  - {id: runc-leaky-vessels, component: runc, cves: [CVE-2024-21626], "
        "summary: s, fixed: ['1.0.0'], sources: [test]}\n"
    )
    with pytest.raises(ConfigError, match="already used by the shipped list"):
        Floors.load(clash)
