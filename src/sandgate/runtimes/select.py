"""Choosing the runtime: config or ``SANDGATE_RUNTIME`` = auto | docker | bwrap."""

from __future__ import annotations

import docker
import docker.errors

from sandgate.config import Config
from sandgate.errors import RuntimeUnavailable
from sandgate.runtimes.base import Runtime
from sandgate.runtimes.docker import DockerRuntime


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


def select_runtime(config: Config, instance_id: str) -> Runtime:
    """Returns the configured runtime; ``auto`` takes Docker when its engine answers."""
    kind = config.runtime.kind
    docker_config = config.runtime.docker
    if kind in ("auto", "docker"):
        if docker_reachable(docker_config.base_url) is not None:
            return DockerRuntime(
                instance_id,
                base_url=docker_config.base_url,
                oci_runtime=docker_config.oci_runtime,
            )
        if kind == "docker":
            raise RuntimeUnavailable(
                "runtime.kind is docker but no Docker engine answers: start dockerd "
                "(`dockerd &` or `systemctl start docker`) or check DOCKER_HOST"
            )
    raise RuntimeUnavailable(
        "no sandbox runtime is available: the Docker engine does not answer and the bwrap "
        "runtime is not available yet. Start dockerd (`dockerd &`), or run `sandgate doctor`"
    )
