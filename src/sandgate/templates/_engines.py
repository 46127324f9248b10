"""Which layer backend a team template build runs on, and getting its tree ready.

Docker when the configured engine answers (the templates are images, exported to trees for the
runtimes as the shipped ones are), else the engine-less backend over ``runtime.rootfs_dir``.
"""

from __future__ import annotations

import docker
import docker.errors

from sandgate.config import Config
from sandgate.runtimes import resolve_rootfs

from ._docker_layers import DockerLayers
from ._layers import LayerBackend
from ._native_layers import NativeLayers

__all__ = ["layer_backend", "prepare_template_tree", "remove_stale_builds"]


def layer_backend(config: Config, owner: str = "") -> LayerBackend:
    """The backend for one build; asks the engine each time (it may come and go). ``owner``
    (the server's instance id) labels its build containers."""
    base_url = config.runtime.docker.base_url
    try:
        client = docker.DockerClient(base_url=base_url) if base_url else docker.from_env()
        client.ping()
    except docker.errors.DockerException:
        return NativeLayers(config.rootfs_dir)
    return DockerLayers(client, owner)


def remove_stale_builds(config: Config, owner: str) -> None:
    """Removes the build containers a crash of this server left running (Docker only)."""
    backend = layer_backend(config, owner)
    if isinstance(backend, DockerLayers):
        backend.remove_stale()


def prepare_template_tree(config: Config, image_ref: str) -> None:
    """Exports a freshly built template's image to the root file system cache now, so its
    first sandbox does not wait for it. Raises ``RuntimeUnavailable``."""
    resolve_rootfs(image_ref, config.rootfs_dir, config.runtime.docker.base_url)
