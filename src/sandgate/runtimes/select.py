"""Choosing the runtime: config or ``SANDGATE_RUNTIME`` = auto | docker | bwrap.

``auto`` takes Docker when its engine answers, else bwrap. A runtime whose isolation features
are missing on this host is never used weaker: selection fails with a message naming each
missing feature and its fix (``sandgate doctor`` prints the same as a table).
"""

from __future__ import annotations

from dataclasses import dataclass

import docker
import docker.errors

from sandgate.config import Config
from sandgate.errors import RuntimeUnavailable
from sandgate.runtimes.base import Runtime
from sandgate.runtimes.bwrap import BwrapRuntime, Requirement, check_host, unavailable_message
from sandgate.runtimes.docker import DockerRuntime

__all__ = ["Choice", "choose", "docker_reachable", "select_runtime"]


def docker_reachable(base_url: str = "") -> str | None:
    """The engine's version, or None when no Docker engine answers."""
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
    runtime can run; ``bwrap`` lists the bwrap requirements when they were probed."""

    kind: str | None
    reason: str
    bwrap: tuple[Requirement, ...] = ()


def choose(config: Config) -> Choice:
    """Decides without starting anything (``doctor`` shows the result)."""
    kind = config.runtime.kind
    docker_version = (
        docker_reachable(config.runtime.docker.base_url) if kind in ("auto", "docker") else None
    )
    if kind == "docker":
        if docker_version is not None:
            return Choice("docker", f"runtime.kind is docker; engine {docker_version} answers")
        return Choice(
            None,
            "runtime.kind is docker but no Docker engine answers: start dockerd "
            "(`dockerd &` or `systemctl start docker`) or check DOCKER_HOST",
        )
    if kind == "auto" and docker_version is not None:
        return Choice("docker", f"runtime.kind is auto and Docker {docker_version} answers")
    requirements = tuple(check_host())
    failing = [r for r in requirements if not r.ok]
    why = "runtime.kind is bwrap" if kind == "bwrap" else "runtime.kind is auto, Docker is absent"
    if failing:
        prefix = "" if kind == "bwrap" else "no Docker engine answers and "
        return Choice(None, prefix + unavailable_message(failing), requirements)
    return Choice("bwrap", f"{why}; every bwrap isolation feature is present", requirements)


def select_runtime(config: Config, instance_id: str) -> Runtime:
    """Returns the chosen runtime; raises ``RuntimeUnavailable`` with the reason and fixes."""
    choice = choose(config)
    if choice.kind == "docker":
        return DockerRuntime(
            instance_id,
            state_dir=config.home_dir / "docker",
            rootfs_dir=config.rootfs_dir,
            base_url=config.runtime.docker.base_url,
            oci_runtime=config.runtime.docker.oci_runtime,
        )
    if choice.kind == "bwrap":
        return BwrapRuntime(
            instance_id,
            home=config.home_dir,
            rootfs_dir=config.rootfs_dir,
            docker_base_url=config.runtime.docker.base_url,
        )
    raise RuntimeUnavailable(choice.reason + ". Run `sandgate doctor` for details")
