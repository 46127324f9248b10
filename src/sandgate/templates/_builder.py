"""Builds the shipped templates into Docker images, idempotently.

A build: resolve the starting image (``_sources``), compute the template digest
(``_digest``), return the existing image when one carries that digest, else run the
template's Dockerfile with ``BASE_IMAGE=<starting image id>``. Results are tagged
``sandgate/template-<name>:<digest[:12]>`` and ``sandgate/template-<name>:latest``.
"""

from __future__ import annotations

import contextlib
import dataclasses
import enum
import os
import shutil
import tempfile
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from ._digest import package_list, template_digest
from ._docker import DockerImage, DockerImages
from ._progress import BuildStep, ProgressCallback, ignore_progress
from ._rootfs import DEFAULT_MIRROR
from ._sources import REGISTRY_IMAGE, ROOTFS_IMAGE, BaseImage, BaseImageResolver, Source
from ._spec import SHIPPED_TEMPLATES, TemplateSpec, default_images_dir
from .errors import TemplateBuildError

__all__ = ["BuiltTemplate", "TemplateBuilder", "TemplateState", "staged_context"]

TEMPLATE_LABEL = "sandgate.template"
DIGEST_LABEL = "sandgate.template.digest"
BASE_LABEL = "sandgate.template.base"


@dataclasses.dataclass(frozen=True, slots=True)
class BuiltTemplate:
    """A built, current template image. ``image_ref`` is the digest-pinned tag."""

    name: str
    image_ref: str
    image_id: str
    digest: str
    size_bytes: int = 0


class TemplateState(enum.StrEnum):
    """Whether a template's image exists and matches its current inputs."""

    CURRENT = "current"
    """An image carries the digest of the current inputs."""
    STALE = "stale"
    """``:latest`` exists but was built from other inputs (or its base is not local)."""
    MISSING = "missing"
    """No image has ever been built for this template."""


class TemplateBuilder:
    """Builds and inspects the shipped templates on one Docker engine.

    ``source`` picks how templates without a parent get their root filesystem (see
    ``Source``); ``mirror`` is the Debian mirror debootstrap uses. ``on_progress``
    receives every progress event. ``images_dir``, ``registry_image``, ``rootfs_image``,
    ``workdir`` (debootstrap's scratch space) and ``image_namespace`` (images are
    ``<namespace>/template-<name>``) rarely need changing. Concurrent builds of one
    template from several processes both build; the last tag wins, which is harmless.
    """

    def __init__(
        self,
        docker_client: Any,
        *,
        source: Source | str = Source.AUTO,
        mirror: str = DEFAULT_MIRROR,
        on_progress: ProgressCallback = ignore_progress,
        images_dir: Path | None = None,
        registry_image: str = REGISTRY_IMAGE,
        rootfs_image: str = ROOTFS_IMAGE,
        workdir: Path | None = None,
        image_namespace: str = "sandgate",
    ) -> None:
        try:
            self._source = Source(source)
        except ValueError:
            choices = ", ".join(s.value for s in Source)
            raise TemplateBuildError(
                f"unknown template source {source!r}: use one of {choices}"
            ) from None
        self._namespace = image_namespace
        self._images = DockerImages(docker_client)
        self._on_progress = on_progress
        self._images_dir = images_dir or default_images_dir()
        self._resolver = BaseImageResolver(
            self._images,
            source=self._source,
            mirror=mirror,
            on_progress=on_progress,
            registry_image=registry_image,
            rootfs_image=rootfs_image,
            workdir=workdir,
        )

    @property
    def source(self) -> Source:
        return self._source

    def build(self, name: str, *, force: bool = False) -> BuiltTemplate:
        """Builds template ``name`` unless a current image exists; returns it.

        Builds the parent template first when there is one. ``force`` rebuilds the
        template image (not its starting image) without the layer cache. Raises
        ``TemplateBuildError`` (unknown name, engine unreachable, no way to get a base,
        Dockerfile failure) with a message saying what to do.
        """
        spec = self._spec(name)
        self._images.check_engine()
        base = self._acquire_base(spec)
        digest = self._digest(spec, base)
        if not force:
            existing = self._find_built(spec, digest, retag_latest=True)
            if existing is not None:
                self._on_progress(BuildStep.BUILD, 1.0, f"{name} is current ({digest[:12]})")
                return existing
        return self._run_build(spec, base, digest, nocache=force)

    def status(self, name: str) -> BuiltTemplate | None:
        """The current image of ``name``, or ``None`` if it must be (re)built.

        Looks only at local images: never pulls or bootstraps, so a template whose
        starting image is not local is reported as not current.
        """
        spec = self._spec(name)
        base = self._find_local_base(spec)
        if base is None:
            return None
        return self._find_built(spec, self._digest(spec, base))

    def state(self, name: str) -> tuple[TemplateState, BuiltTemplate | None]:
        """Like ``status`` but tells a stale image from a missing one; the second item is
        the current image, or the stale ``:latest`` one, or ``None``."""
        current = self.status(name)
        if current is not None:
            return TemplateState.CURRENT, current
        spec = self._spec(name)
        latest = self._images.get(f"{self._repository(spec)}:latest")
        if latest is None:
            return TemplateState.MISSING, None
        return TemplateState.STALE, self._built(spec, latest)

    def ensure(self, names: Iterable[str]) -> list[BuiltTemplate]:
        """Builds each named template that is missing or stale; returns all of them, in
        the order given. Raises ``TemplateBuildError`` on the first failure."""
        return [self.build(name) for name in dict.fromkeys(names)]

    def _spec(self, name: str) -> TemplateSpec:
        spec = SHIPPED_TEMPLATES.get(name)
        if spec is None:
            known = ", ".join(sorted(SHIPPED_TEMPLATES))
            raise TemplateBuildError(f"unknown template {name!r}: shipped templates are {known}")
        if not (self._context(spec) / "Dockerfile").is_file():
            raise TemplateBuildError(
                f"template {name!r} has no Dockerfile in {self._context(spec)}: "
                "run from a source checkout or reinstall sandgate"
            )
        return spec

    def _repository(self, spec: TemplateSpec) -> str:
        return f"{self._namespace}/template-{spec.name}"

    def _context(self, spec: TemplateSpec) -> Path:
        return self._images_dir / spec.context

    def _packages(self, spec: TemplateSpec) -> list[str]:
        path = self._context(spec) / "packages.txt"
        return package_list(path) if path.is_file() else []

    def _acquire_base(self, spec: TemplateSpec) -> BaseImage:
        if spec.parent is not None:
            parent = self.build(spec.parent)
            return BaseImage(parent.image_ref, parent.image_id, offline=False)
        return self._resolver.acquire(self._packages(spec))

    def _find_local_base(self, spec: TemplateSpec) -> BaseImage | None:
        if spec.parent is not None:
            parent = self.status(spec.parent)
            if parent is None:
                return None
            return BaseImage(parent.image_ref, parent.image_id, offline=False)
        return self._resolver.find_local(self._packages(spec))

    def _staged_context(
        self, spec: TemplateSpec, *, for_build: bool = False
    ) -> contextlib.AbstractContextManager[Path]:
        return staged_context(self._images_dir, spec, for_build=for_build)

    def _digest(self, spec: TemplateSpec, base: BaseImage) -> str:
        with self._staged_context(spec) as context:
            return template_digest(spec.name, context, base.id, self._build_args(base))

    @staticmethod
    def _build_args(base: BaseImage) -> dict[str, str]:
        return {"BASE_IMAGE": base.id}

    def _find_built(
        self, spec: TemplateSpec, digest: str, *, retag_latest: bool = False
    ) -> BuiltTemplate | None:
        image = self._images.get(f"{self._repository(spec)}:{digest[:12]}")
        if image is None or image.labels.get(DIGEST_LABEL) != digest:
            return None
        latest = f"{self._repository(spec)}:latest"
        if retag_latest and latest not in image.tags:
            self._images.tag(image.id, latest)
        return self._built(spec, image)

    def _built(self, spec: TemplateSpec, image: DockerImage) -> BuiltTemplate:
        digest = image.labels.get(DIGEST_LABEL, "")
        pinned = f"{self._repository(spec)}:{digest[:12]}"
        return BuiltTemplate(
            name=spec.name,
            image_ref=pinned if pinned in image.tags else f"{self._repository(spec)}:latest",
            image_id=image.id,
            digest=digest,
            size_bytes=image.size_bytes,
        )

    def _run_build(
        self, spec: TemplateSpec, base: BaseImage, digest: str, *, nocache: bool
    ) -> BuiltTemplate:
        pinned = f"{self._repository(spec)}:{digest[:12]}"
        self._on_progress(BuildStep.BUILD, 0.0, f"building {pinned} from {base.ref}")

        def on_step(number: int, total: int, text: str) -> None:
            self._on_progress(
                BuildStep.BUILD, (number - 1) / total, f"Step {number}/{total} : {text}"
            )

        latest = f"{self._repository(spec)}:latest"
        previous = {image.id for image in map(self._images.get, (pinned, latest)) if image}
        with self._staged_context(spec, for_build=True) as context:
            image_id = self._images.build(
                context,
                tag=pinned,
                build_args=self._build_args(base),
                labels={TEMPLATE_LABEL: spec.name, DIGEST_LABEL: digest, BASE_LABEL: base.id},
                # SECURITY-adjacent: an offline base already holds every package, so the
                # Dockerfile gets no network and cannot quietly depend on one. A template
                # with a parent (offline=False) may fetch packages in its RUN steps.
                network_mode="none" if base.offline else None,
                nocache=nocache,
                on_step=on_step,
            )
        self._images.tag(image_id, latest)
        for old_id in previous - {image_id}:
            self._images.remove_if_untagged(old_id)
        image = self._images.get(image_id)
        if image is None:
            raise TemplateBuildError(f"built {pinned} but the engine does not list it")
        self._on_progress(BuildStep.BUILD, 1.0, f"built {pinned}")
        return self._built(spec, image)


@contextlib.contextmanager
def staged_context(
    images_dir: Path, spec: TemplateSpec, *, for_build: bool = False
) -> Iterator[Path]:
    """The build context with ``spec.vendored`` packages copied in (a temporary copy),
    or the context itself when nothing is vendored.

    ``for_build`` also adds ``_build-ca.pem``: the host's CA bundle for HTTPS downloads
    in RUN steps (``PIP_CERT``, ``REQUESTS_CA_BUNDLE`` or ``SSL_CERT_FILE``; empty when
    none is set), so a build behind a TLS-intercepting proxy works like the host does.
    It is left out of the digest, which must not depend on the machine.
    """
    context = images_dir / spec.context
    if not spec.vendored:
        yield context
        return
    package_dir = Path(__file__).resolve().parent.parent
    with tempfile.TemporaryDirectory(prefix="sandgate-context-") as tmp:
        staged = Path(tmp) / "context"
        shutil.copytree(context, staged, symlinks=True)
        vendor = staged / "_vendor" / "sandgate"
        vendor.mkdir(parents=True)
        (vendor / "__init__.py").write_text('"""Sandgate modules vendored into a template."""\n')
        for name in spec.vendored:
            module = package_dir / f"{name}.py"
            if module.is_file():
                shutil.copyfile(module, vendor / module.name)
                continue
            shutil.copytree(
                package_dir / name,
                vendor / name,
                ignore=shutil.ignore_patterns("__pycache__", "*.pyc"),
            )
        if for_build:
            (staged / "_build-ca.pem").write_bytes(_host_ca_bundle())
        yield staged


def _host_ca_bundle() -> bytes:
    for variable in ("PIP_CERT", "REQUESTS_CA_BUNDLE", "SSL_CERT_FILE"):
        path = os.environ.get(variable)
        if path and Path(path).is_file():
            return Path(path).read_bytes()
    return b""
