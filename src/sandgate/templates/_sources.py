"""Where a root template's starting image comes from: a registry or debootstrap.

``Source.AUTO`` prefers whatever is already local (the registry image, then a current
debootstrap'ed rootfs), so a warm build never touches the network; only when neither is
present does it try a short pull and then fall back to debootstrap.
"""

from __future__ import annotations

import dataclasses
import enum
from pathlib import Path
from typing import TYPE_CHECKING

from ._digest import rootfs_digest
from ._progress import BuildStep, ProgressCallback
from ._rootfs import SUITE, VARIANT, bootstrap_rootfs
from .errors import TemplateBuildError

if TYPE_CHECKING:
    from ._docker import DockerImages

__all__ = [
    "REGISTRY_IMAGE",
    "ROOTFS_DIGEST_LABEL",
    "ROOTFS_IMAGE",
    "BaseImage",
    "BaseImageResolver",
    "Source",
]

REGISTRY_IMAGE = "debian:bookworm-slim"
ROOTFS_IMAGE = f"sandgate/rootfs:{SUITE}"
ROOTFS_DIGEST_LABEL = "sandgate.rootfs.digest"
ROOTFS_PACKAGES_LABEL = "sandgate.rootfs.packages"

AUTO_PULL_TIMEOUT = 20.0
"""Seconds of silence after which ``auto`` gives up on the registry and bootstraps."""
REGISTRY_PULL_TIMEOUT = 120.0


class Source(enum.StrEnum):
    """How to get the starting root filesystem of a template without a parent."""

    AUTO = "auto"
    """Local registry image, else current local rootfs, else pull, else debootstrap."""
    REGISTRY = "registry"
    """Pull the public base image; fail when the registry is unreachable."""
    DEBOOTSTRAP = "debootstrap"
    """Bootstrap from a Debian mirror and ``docker import`` it; no registry needed."""


@dataclasses.dataclass(frozen=True, slots=True)
class BaseImage:
    """The starting image of a build. ``offline`` means it already holds every package,
    so the Dockerfile can run without network."""

    ref: str
    id: str
    offline: bool


class BaseImageResolver:
    """Finds (``find_local``) or produces (``acquire``) the starting image."""

    def __init__(
        self,
        images: DockerImages,
        *,
        source: Source,
        mirror: str,
        on_progress: ProgressCallback,
        registry_image: str = REGISTRY_IMAGE,
        rootfs_image: str = ROOTFS_IMAGE,
        workdir: Path | None = None,
    ) -> None:
        self._images = images
        self._source = source
        self._mirror = mirror
        self._on_progress = on_progress
        self._registry_image = registry_image
        self._rootfs_image = rootfs_image
        self._workdir = workdir

    def find_local(self, packages: list[str]) -> BaseImage | None:
        """The image ``acquire`` would use if it is already local; no side effects."""
        if self._source in (Source.AUTO, Source.REGISTRY):
            image = self._images.get(self._registry_image)
            if image is not None:
                return BaseImage(self._registry_image, image.id, offline=False)
        if self._source in (Source.AUTO, Source.DEBOOTSTRAP):
            ref = self._rootfs_ref(packages)
            image = self._images.get(ref)
            if image is not None and image.labels.get(ROOTFS_DIGEST_LABEL) == _digest(packages):
                return BaseImage(ref, image.id, offline=True)
        return None

    def _rootfs_ref(self, packages: list[str]) -> str:
        """The debootstrap image's tag carries its digest: root file systems of different
        package sets (another Sandgate version on the same engine) coexist, never replace each
        other."""
        return f"{self._rootfs_image}-{_digest(packages)[:12]}"

    def acquire(self, packages: list[str]) -> BaseImage:
        """Returns the starting image, pulling or bootstrapping it when needed.

        ``registry`` always pulls (to refresh) and fails when it cannot; ``debootstrap``
        reuses a rootfs image whose label matches ``packages``; ``auto`` is described in
        the module docstring. Raises ``TemplateBuildError`` saying what to do.
        """
        self._on_progress(BuildStep.RESOLVE, None, f"looking for a base image ({self._source})")
        if self._source is Source.REGISTRY:
            try:
                return self._pull(REGISTRY_PULL_TIMEOUT)
            except TemplateBuildError as exc:
                raise TemplateBuildError(
                    f"{exc}\nmake the registry reachable, or build offline with "
                    "--source debootstrap (templates.source = debootstrap)"
                ) from exc
        local = self.find_local(packages)
        if local is not None:
            self._on_progress(BuildStep.RESOLVE, 1.0, f"using local {local.ref}")
            return local
        self._on_progress(BuildStep.RESOLVE, 1.0, "no usable base image is local")
        if self._source is Source.AUTO:
            try:
                return self._pull(AUTO_PULL_TIMEOUT)
            except TemplateBuildError as exc:
                self._on_progress(
                    BuildStep.PULL, 1.0, f"registry unavailable, bootstrapping: {exc}"
                )
        return self._bootstrap(packages)

    def _pull(self, timeout: float) -> BaseImage:
        self._on_progress(BuildStep.PULL, None, f"pulling {self._registry_image}")
        image_id = self._images.pull(
            self._registry_image,
            stall_timeout=timeout,
            on_status=lambda status: self._on_progress(BuildStep.PULL, None, status),
        )
        self._on_progress(BuildStep.PULL, 1.0, f"pulled {self._registry_image}")
        return BaseImage(self._registry_image, image_id, offline=False)

    def _bootstrap(self, packages: list[str]) -> BaseImage:
        if not packages:
            raise TemplateBuildError("cannot bootstrap a root filesystem without packages")
        ref = self._rootfs_ref(packages)
        image_id = bootstrap_rootfs(
            self._images,
            ref=ref,
            packages=packages,
            mirror=self._mirror,
            labels={
                ROOTFS_DIGEST_LABEL: _digest(packages),
                ROOTFS_PACKAGES_LABEL: ",".join(sorted(packages)),
            },
            on_progress=self._on_progress,
            workdir=self._workdir,
        )
        return BaseImage(ref, image_id, offline=True)


def _digest(packages: list[str]) -> str:
    return rootfs_digest(SUITE, VARIANT, packages)
