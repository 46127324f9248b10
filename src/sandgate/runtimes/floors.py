"""Runtime floors: sandboxes never start on a kernel or container runtime with a known, fixed
escape, unless the operator accepted that exact risk.

Trust: the floor list (``profiles/runtime-floors.yaml``, reviewed like code) and the operator
(config) are trusted; the host's components are judged by the versions they report.

What is enforced here: each floor names a component, its CVEs and the first fixed release of
each branch. ``evaluate`` judges every probed component (``_probe.py``) against every floor:

* fixed upstream (the branch's fixed release or later, or a newer branch), or a distribution
  build listed as carrying the fix for each CVE → ok;
* older than the bug, or the floor's condition is absent → not affected;
* otherwise below. An enforced floor below refuses sandboxes on the runtimes that use the
  component (``RUNTIME_COMPONENTS``; the kernel counts for both) unless every open CVE is
  named by a live ``runtime.accept_below_floor`` exception, which makes it *accepted*: shown
  by ``sandgate doctor`` and ``GET /health`` and logged at every start, never reported as a
  pass. A floor without CVEs (a feature floor) cannot be accepted. An unreadable version is
  below: what cannot be checked is not trusted.

What is left to others: ``select.py`` picks the runtime from the report (``auto`` skips Docker
when it is below and bwrap passes) and ``_guard.py`` refuses creates. Floors are version
numbers: a custom build that carries a fix under an old version is refused (accept it
explicitly), and one that lacks a fix under a new version passes. Components not listed
(crun, runsc) are not judged.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import date
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from sandgate.config import Config, FloorComponent, FloorException
from sandgate.config._model import CveId
from sandgate.errors import ConfigError
from sandgate.runtimes._probe import (
    AUTHZ_PLUGINS,
    ComponentFact,
    HostFacts,
    package_build,
    probe_host,
)
from sandgate.runtimes._versions import Version, parse_version, same_security_series

__all__ = [
    "FLOORS_PATH",
    "RUNTIME_COMPONENTS",
    "DistroBuild",
    "Finding",
    "Floor",
    "FloorReport",
    "FloorStatus",
    "Floors",
    "check_floors",
    "evaluate",
]

FLOORS_PATH = Path(__file__).parent / "profiles" / "runtime-floors.yaml"

#: Which components each runtime's sandboxes depend on.
RUNTIME_COMPONENTS: Mapping[str, tuple[str, ...]] = {
    "docker": ("kernel", "docker", "containerd", "runc"),
    "bwrap": ("kernel", "bubblewrap"),
}
_CONDITIONS = {AUTHZ_PLUGINS: "an engine that runs authorization (AuthZ) plugins"}
_DOCS = 'docs/operations.md, "Runtime floors"'


# -- the floor list -----------------------------------------------------------------------------


class _FloorEntry(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    id: str = Field(min_length=1)
    component: FloorComponent
    cves: list[CveId]
    summary: str = Field(min_length=1)
    fixed: list[str] = Field(min_length=1)
    introduced: str | None = None
    when: Literal["docker_authz_plugins"] | None = None
    enforced: bool = True
    note: str = ""
    sources: list[str] = Field(min_length=1)

    @field_validator("fixed")
    @classmethod
    def _versions(cls, value: list[str]) -> list[str]:
        for text in value:
            if parse_version(text) is None:
                raise ValueError(f"'{text}' is not a version")
        branches = [_parsed(text).branch for text in value]
        if len(set(branches)) != len(branches):
            raise ValueError("list one fixed release per branch")
        return value

    @field_validator("introduced")
    @classmethod
    def _introduced(cls, value: str | None) -> str | None:
        if value is not None and parse_version(value) is None:
            raise ValueError(f"'{value}' is not a version")
        return value


class _BuildEntry(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    component: FloorComponent
    build: str = Field(min_length=1)
    fixes: list[CveId] = Field(min_length=1)
    source: str = Field(min_length=1)


class _Document(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    reviewed: str | None = None
    floors: list[_FloorEntry] = Field(default_factory=list)
    distro_builds: list[_BuildEntry] = Field(default_factory=list)


@dataclass(frozen=True)
class Floor:
    """One entry of the floor list (see the file's header for the meaning of each field)."""

    id: str
    component: str
    cves: tuple[str, ...]
    summary: str
    fixed: tuple[str, ...]
    introduced: str | None
    when: str | None
    enforced: bool
    note: str
    sources: tuple[str, ...]

    @property
    def required(self) -> str:
        """``1.2.8+, 1.3.3+ or 1.4.0-rc.3+ (or a newer branch)``: what passes."""
        listed = [f"{text}+" for text in self.fixed]
        text = listed[0] if len(listed) == 1 else ", ".join(listed[:-1]) + " or " + listed[-1]
        return f"{text} (or a newer branch)"

    def fixed_in(self, version: Version) -> bool:
        fixed = [_parsed(text) for text in self.fixed]
        same_branch = [f for f in fixed if f.branch == version.branch]
        if same_branch:
            return version >= same_branch[0]
        return all(version.branch > f.branch for f in fixed)

    def affects(self, version: Version) -> bool:
        return self.introduced is None or version >= _parsed(self.introduced)


@dataclass(frozen=True)
class DistroBuild:
    """A distribution package known to carry the fixes for ``fixes``."""

    component: str
    build: str
    fixes: tuple[str, ...]
    source: str


@dataclass(frozen=True)
class Floors:
    """The floor list: the shipped file plus the operator's ``runtime.extra_floors``."""

    floors: tuple[Floor, ...]
    builds: tuple[DistroBuild, ...] = ()

    @classmethod
    def load(cls, extra: Path | None = None) -> Floors:
        """The shipped floors, plus ``extra`` (floors only: an operator's file may add
        requirements, never allow-list a build). Raises ``ConfigError`` naming the file."""
        floors = cls.parse(_read(FLOORS_PATH), str(FLOORS_PATH))
        if extra is None:
            return floors
        added = cls.parse(_read(extra), str(extra))
        if added.builds:
            raise ConfigError(
                f"{extra}: runtime.extra_floors may add floors only; distro_builds belong in "
                "the reviewed list shipped with Sandgate (or accept the CVE with "
                "runtime.accept_below_floor)"
            )
        clash = {f.id for f in floors.floors} & {f.id for f in added.floors}
        if clash:
            raise ConfigError(
                f"{extra}: floor ids already used by the shipped list: {sorted(clash)}"
            )
        return cls(floors.floors + added.floors, floors.builds)

    @classmethod
    def parse(cls, document: object, origin: str) -> Floors:
        """Validates one floor document; raises ``ConfigError`` naming the bad entry."""
        try:
            parsed = _Document.model_validate(document if document is not None else {})
        except ValidationError as exc:
            first = exc.errors()[0]
            where = ".".join(str(part) for part in first["loc"]) or "(top level)"
            raise ConfigError(
                f"floor list {origin} is not valid: {where}: {first['msg']}"
            ) from None
        ids = [entry.id for entry in parsed.floors]
        if len(set(ids)) != len(ids):
            raise ConfigError(f"floor list {origin} repeats a floor id")
        for build in parsed.distro_builds:
            known = {cve for f in parsed.floors if f.component == build.component for cve in f.cves}
            stray = sorted(set(build.fixes) - known)
            if stray:
                raise ConfigError(
                    f"floor list {origin}: distro build {build.build} lists {', '.join(stray)}, "
                    f"which no {build.component} floor names"
                )
        return cls(
            tuple(
                Floor(
                    id=e.id,
                    component=e.component,
                    cves=tuple(e.cves),
                    summary=" ".join(e.summary.split()),
                    fixed=tuple(e.fixed),
                    introduced=e.introduced,
                    when=e.when,
                    enforced=e.enforced,
                    note=" ".join(e.note.split()),
                    sources=tuple(e.sources),
                )
                for e in parsed.floors
            ),
            tuple(
                DistroBuild(b.component, b.build, tuple(b.fixes), " ".join(b.source.split()))
                for b in parsed.distro_builds
            ),
        )

    def for_component(self, component: str) -> tuple[Floor, ...]:
        return tuple(f for f in self.floors if f.component == component)

    def patched_build(self, component: str, build: str, cve: str) -> DistroBuild | None:
        """The allow-list entry that says ``build`` of ``component`` carries the fix for
        ``cve`` (exactly, or as a later update of the same Debian security series)."""
        for entry in self.builds:
            if (
                entry.component == component
                and cve in entry.fixes
                and same_security_series(build, entry.build)
            ):
                return entry
        return None


# -- judging the host ---------------------------------------------------------------------------


class FloorStatus(enum.Enum):
    #: Fixed: an upstream release at or above the floor, or a listed distribution build.
    OK = "ok"
    #: Older than the bug, or the floor's condition (e.g. AuthZ plugins) is absent.
    NOT_AFFECTED = "not_affected"
    #: Below an enforced floor and not accepted: sandboxes are refused on it.
    BELOW = "below"
    #: Below, but every open CVE is named by a live ``runtime.accept_below_floor`` exception.
    ACCEPTED = "accepted"
    #: Below a floor that is shown but not enforced (its note says why).
    ADVISORY = "advisory"


@dataclass(frozen=True)
class Finding:
    """One component (as one source reports it) against one floor."""

    floor: Floor
    fact: ComponentFact
    status: FloorStatus
    #: The floor's CVEs this version does not fix (empty when fixed, or for a feature floor).
    open_cves: tuple[str, ...]
    #: Why this status, in a few words (a listed build, a condition, an unreadable version).
    detail: str
    #: The distribution build the verdict used, when one was known or looked up.
    build: str | None = None
    accepted_by: tuple[FloorException, ...] = ()

    @property
    def component(self) -> str:
        return self.floor.component

    @property
    def found(self) -> str:
        return self.build or self.fact.version or "unknown"

    def problem(self) -> str:
        """One sentence: what is below what, and why it matters."""
        what = f"{self.component} {self.found} ({self.fact.source})"
        if parse_version(self.fact.version) is None:
            return (
                f"{self.component} ({self.fact.source}) reports no version Sandgate can read "
                f"({self.fact.version or 'none'!r}), "
                f"so its floor for {_cves(self.floor.cves)} cannot be checked"
            )
        if not self.floor.cves:
            return (
                f"{what} is below {self.floor.required}, which Sandgate needs: {self.floor.summary}"
            )
        return (
            f"{what} is below its patched floor for {_cves(self.open_cves)}, "
            f"needs {self.floor.required}: {self.floor.summary}"
        )

    def fix(self) -> str:
        if not self.floor.cves:
            return f"upgrade {self.component} to {self.floor.required}"
        return (
            f"upgrade {self.component} to {self.floor.required}, or accept "
            f"{_cves(self.open_cves or self.floor.cves)} for {self.component} in "
            "runtime.accept_below_floor (with a reason)"
        )


@dataclass(frozen=True)
class FloorReport:
    """Every finding for the probed components, and what became of the exceptions."""

    findings: tuple[Finding, ...] = ()
    #: Exception CVEs that matched nothing below (already fixed, or a typo): warned about.
    unused: tuple[tuple[FloorException, str], ...] = ()
    #: Exceptions past their ``expires`` day: ignored, warned about.
    expired: tuple[FloorException, ...] = ()

    def for_runtime(self, kind: str) -> tuple[Finding, ...]:
        components = RUNTIME_COMPONENTS.get(kind, ())
        return tuple(f for f in self.findings if f.component in components)

    def blocking(self, kind: str) -> tuple[Finding, ...]:
        """Findings that refuse sandboxes on runtime ``kind``."""
        return tuple(f for f in self.for_runtime(kind) if f.status is FloorStatus.BELOW)

    def accepted(self, kind: str) -> tuple[Finding, ...]:
        return tuple(f for f in self.for_runtime(kind) if f.status is FloorStatus.ACCEPTED)

    def refusal(self, kind: str) -> str | None:
        """The error a create on ``kind`` answers, or None when its floors pass."""
        blocking = self.blocking(kind)
        if not blocking:
            return None
        problems = "; ".join(f.problem() for f in blocking)
        return (
            f"the {kind} runtime is below its patched floors, so Sandgate starts no sandbox on "
            f"it: {problems}. Fix: upgrade (`sandgate doctor` lists every floor), or accept "
            f"each CVE explicitly with runtime.accept_below_floor ({_DOCS}); then restart "
            "sandgate serve"
        )

    def state(self, kind: str) -> str:
        """``below`` (sandboxes refused), ``accepted`` (running with exceptions) or ``ok``."""
        if self.blocking(kind):
            return "below"
        return "accepted" if self.accepted(kind) else "ok"


def evaluate(
    facts: HostFacts,
    floors: Floors,
    exceptions: Sequence[FloorException] = (),
    *,
    today: date | None = None,
    lookup_build: Callable[[str], str | None] | None = None,
) -> FloorReport:
    """Judges every fact against every floor of its component (pure; ``lookup_build`` maps a
    binary path to its package version and is asked only when a build could change a
    verdict)."""
    today = today or date.today()
    live = [e for e in exceptions if e.expires is None or e.expires >= today]
    expired = tuple(e for e in exceptions if e.expires is not None and e.expires < today)
    used: set[tuple[int, str]] = set()
    findings = []
    for fact in facts.components:
        for floor in floors.for_component(fact.component):
            finding = _judge(fact, floor, floors, facts.conditions, lookup_build)
            if finding.status is FloorStatus.BELOW and finding.open_cves:
                finding = _apply_exceptions(finding, live, used)
            findings.append(finding)
    unused = tuple(
        (exception, cve)
        for index, exception in enumerate(live)
        for cve in exception.cves
        if (index, cve) not in used
    )
    return FloorReport(tuple(findings), unused, expired)


def check_floors(
    config: Config,
    *,
    docker: bool,
    bwrap: bool,
    runc_path: str = "runc",
    facts: HostFacts | None = None,
) -> FloorReport:
    """Probes this host (the kernel always; the Docker engine, its containerd and runc, and the
    runc binary at ``runc_path`` when ``docker``; bubblewrap when ``bwrap``) and judges it with
    the configured floors and exceptions. ``facts`` replaces the probe (tests, other hosts).

    ``runc_path`` is the runc Docker sandboxes execute (default: ``runc`` on PATH); it is
    compared with what the engine reports, and both are judged when they differ.
    """
    if facts is None:
        facts = probe_host(
            docker_base_url=config.runtime.docker.base_url if docker else None,
            bwrap=bwrap,
            runc_path=runc_path,
        )
    floors = Floors.load(config.runtime.extra_floors)
    return evaluate(facts, floors, config.runtime.accept_below_floor, lookup_build=package_build)


def _judge(
    fact: ComponentFact,
    floor: Floor,
    floors: Floors,
    conditions: Iterable[str],
    lookup_build: Callable[[str], str | None] | None,
) -> Finding:
    below = FloorStatus.BELOW if floor.enforced else FloorStatus.ADVISORY
    if floor.when is not None and floor.when not in conditions:
        return Finding(
            floor, fact, FloorStatus.NOT_AFFECTED, (), f"applies only to {_CONDITIONS[floor.when]}"
        )
    version = parse_version(fact.version)
    if version is None:
        return Finding(floor, fact, below, floor.cves, "version unknown", fact.build)
    if not floor.affects(version):
        return Finding(
            floor,
            fact,
            FloorStatus.NOT_AFFECTED,
            (),
            f"older than {floor.introduced}, not affected",
        )
    if floor.fixed_in(version):
        return Finding(floor, fact, FloorStatus.OK, (), "fixed upstream", fact.build)
    build = fact.build
    if build is None and fact.binary is not None and lookup_build is not None and floor.cves:
        looked_up = lookup_build(fact.binary)
        # The package must be the version the component reports, or it is not the same build.
        if looked_up is not None and parse_version(looked_up) == version:
            build = looked_up
    patched = {
        cve: entry
        for cve in floor.cves
        if build is not None and (entry := floors.patched_build(fact.component, build, cve))
    }
    open_cves = tuple(cve for cve in floor.cves if cve not in patched)
    if floor.cves and not open_cves:
        sources = "; ".join(dict.fromkeys(entry.source for entry in patched.values()))
        return Finding(
            floor,
            fact,
            FloorStatus.OK,
            (),
            f"distribution build carries the fixes ({sources})",
            build,
        )
    detail = "no upstream fix in this version"
    if patched:
        detail += f"; build {build} carries fixes for {_cves(tuple(patched))} only"
    elif build is not None:
        detail += f"; build {build} is not listed as carrying the fixes"
    if not floor.enforced:
        detail += f" (not enforced: {floor.note})"
    return Finding(floor, fact, below, open_cves, detail, build)


def _apply_exceptions(
    finding: Finding, live: Sequence[FloorException], used: set[tuple[int, str]]
) -> Finding:
    covering: list[FloorException] = []
    covered: set[str] = set()
    for index, exception in enumerate(live):
        if exception.component != finding.component:
            continue
        hits = set(exception.cves) & set(finding.open_cves)
        if hits:
            covering.append(exception)
            covered |= hits
            used.update((index, cve) for cve in hits)
    if covered >= set(finding.open_cves):
        return Finding(
            finding.floor,
            finding.fact,
            FloorStatus.ACCEPTED,
            finding.open_cves,
            finding.detail + "; accepted by runtime.accept_below_floor",
            finding.build,
            tuple(covering),
        )
    if covered:
        remaining = tuple(c for c in finding.open_cves if c not in covered)
        return Finding(
            finding.floor,
            finding.fact,
            FloorStatus.BELOW,
            remaining,
            finding.detail + f"; only {_cves(tuple(sorted(covered)))} accepted",
            finding.build,
        )
    return finding


def _cves(cves: Sequence[str]) -> str:
    return ", ".join(cves) if cves else "(no CVE: a feature floor)"


def _parsed(text: str) -> Version:
    version = parse_version(text)
    if version is None:  # validated when the list is loaded
        raise ConfigError(f"'{text}' is not a version")
    return version


def _read(path: Path) -> Any:
    try:
        return yaml.safe_load(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise ConfigError(f"cannot read floor list {path}: {exc.strerror}") from None
    except yaml.YAMLError as exc:
        raise ConfigError(f"floor list {path} is not valid YAML: {exc}") from None
