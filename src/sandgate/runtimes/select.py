"""Choosing the runtime: config or ``SANDGATE_RUNTIME`` = auto | docker | bwrap.

``auto`` takes Docker when its engine answers and its floors pass (``floors.py``), else bwrap.
A runtime whose isolation features are missing on this host is never used weaker: selection
fails with a message naming each missing feature and its fix (``sandgate doctor`` prints the
same as a table). A runtime below a patched floor is still selected when nothing better is
allowed (``kind: docker``, or no runtime passes), but wrapped in ``FloorGuard``: the server
starts, says why, and every create is refused with ``runtime_below_floor``.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from sandgate.config import Config
from sandgate.errors import RuntimeUnavailable
from sandgate.runtimes._guard import FloorGuard
from sandgate.runtimes._probe import HostFacts
from sandgate.runtimes.base import Runtime
from sandgate.runtimes.bwrap import BwrapRuntime, Requirement, check_host, unavailable_message
from sandgate.runtimes.floors import FloorReport, check_floors

__all__ = ["Choice", "choose", "docker_reachable", "select", "select_runtime"]


def docker_reachable(base_url: str = "") -> str | None:
    """The engine's version, or None when no Docker engine answers."""
    import docker  # here: choosing bwrap (and the CLI's start) never loads the SDK
    import docker.errors

    try:
        client = docker.DockerClient(base_url=base_url) if base_url else docker.from_env()
        try:
            return str(client.version().get("Version", "unknown"))
        finally:
            client.close()
    except docker.errors.DockerException:
        return None


@dataclass(frozen=True)
class Choice:
    """Which runtime this configuration gets on this host, and why. ``kind`` is None when no
    runtime can run; ``bwrap`` lists the bwrap requirements when they were probed; ``floors``
    judges every component probed (``refusal`` is set when ``kind`` is below its floors)."""

    kind: str | None
    reason: str
    bwrap: tuple[Requirement, ...] = ()
    floors: FloorReport = field(default_factory=FloorReport)

    @property
    def refusal(self) -> str | None:
        return self.floors.refusal(self.kind) if self.kind is not None else None


def choose(config: Config, *, facts: HostFacts | None = None) -> Choice:
    """Decides without starting anything (``doctor`` shows the result). ``facts`` replaces
    the probe of the host's versions (tests)."""
    kind = config.runtime.kind
    docker_version = (
        docker_reachable(config.runtime.docker.base_url) if kind in ("auto", "docker") else None
    )
    floors = check_floors(
        config,
        docker=docker_version is not None,
        bwrap=kind != "docker",
        facts=facts,
        # The runc Docker sandboxes really execute: Sandgate's shim hands them to this one.
        runc_path=config.runtime.docker.oci_runtime,
    )
    if kind == "docker":
        if docker_version is not None:
            why = f"runtime.kind is docker; engine {docker_version} answers"
            return Choice("docker", _with_floors(why, floors, "docker"), floors=floors)
        return Choice(
            None,
            "runtime.kind is docker but no Docker engine answers: start dockerd "
            "(`dockerd &` or `systemctl start docker`) or check DOCKER_HOST",
            floors=floors,
        )
    docker_why = ""
    if kind == "auto" and docker_version is not None:
        why = f"runtime.kind is auto and Docker {docker_version} answers"
        if not floors.blocking("docker"):
            return Choice("docker", _with_floors(why, floors, "docker"), floors=floors)
        docker_why = (
            f"Docker {docker_version} answers but is below its patched floors ("
            + "; ".join(f.problem() for f in floors.blocking("docker"))
            + ")"
        )
    requirements = tuple(check_host())
    failing = [r for r in requirements if not r.ok]
    if docker_why and (failing or floors.blocking("bwrap")):
        # Nothing passes: Docker it is, and the guard refuses every create with the reasons.
        return Choice(
            "docker",
            f"runtime.kind is auto; {docker_why}; bwrap cannot replace it",
            requirements,
            floors,
        )
    if kind == "bwrap":
        why = "runtime.kind is bwrap"
    elif docker_why:
        why = f"runtime.kind is auto; {docker_why}, so bwrap runs sandboxes"
    else:
        why = "runtime.kind is auto, Docker is absent"
    if failing:
        prefix = "" if kind == "bwrap" else "no Docker engine answers and "
        return Choice(None, prefix + unavailable_message(failing), requirements, floors)
    why += "; every bwrap isolation feature is present"
    return Choice("bwrap", _with_floors(why, floors, "bwrap"), requirements, floors)


def select_runtime(config: Config, instance_id: str, *, facts: HostFacts | None = None) -> Runtime:
    """Returns the chosen runtime; raises ``RuntimeUnavailable`` with the reason and fixes."""
    return select(config, instance_id, facts=facts)[0]


def select(
    config: Config, instance_id: str, *, facts: HostFacts | None = None
) -> tuple[Runtime, Choice]:
    """The chosen runtime (wrapped in ``FloorGuard`` when it is below its floors) and the
    choice with its floor report; raises ``RuntimeUnavailable`` when no runtime can run.
    ``facts`` replaces the probe of the host's versions (tests)."""
    choice = choose(config, facts=facts)
    runtime: Runtime
    if choice.kind == "docker":
        from sandgate.runtimes.docker import DockerRuntime

        runtime = DockerRuntime(
            instance_id,
            state_dir=config.home_dir / "docker",
            rootfs_dir=config.rootfs_dir,
            base_url=config.runtime.docker.base_url,
            oci_runtime=config.runtime.docker.oci_runtime,
        )
    elif choice.kind == "bwrap":
        runtime = BwrapRuntime(
            instance_id,
            home=config.home_dir,
            rootfs_dir=config.rootfs_dir,
            docker_base_url=config.runtime.docker.base_url,
        )
    else:
        raise RuntimeUnavailable(choice.reason + ". Run `sandgate doctor` for details")
    if choice.refusal is not None:
        runtime = FloorGuard(runtime, choice.refusal)
    return runtime, choice


def _with_floors(why: str, floors: FloorReport, kind: str) -> str:
    state = floors.state(kind)
    if state == "below":
        return f"{why}, but it is below its patched floors: every create is refused"
    if state == "accepted":
        return f"{why}; below its floors with accepted exceptions (runtime.accept_below_floor)"
    return why
