"""First-run work of ``serve``: build the shipped templates that are missing, with progress,
and record every built template in the store so sandboxes can be created from it.

With a Docker engine the templates are images (exported for bwrap when needed); without one,
and with a runtime that can be bwrap, they are built as root-filesystem directories
(``NativeTemplateBuilder``), so a host without any container engine still works."""

from __future__ import annotations

import docker
import docker.errors

from sandgate.cli._common import err_console
from sandgate.cli.templates import _ProgressView
from sandgate.config import Config
from sandgate.errors import RuntimeUnavailable, TemplateBuildError
from sandgate.runtimes import resolve_rootfs
from sandgate.sandboxes.catalog import register
from sandgate.store import Store
from sandgate.templates import SHIPPED_TEMPLATES, NativeTemplateBuilder, TemplateBuilder
from sandgate.templates import TemplateBuildError as BuilderError


def ensure_shipped_templates(config: Config, store: Store, *, build: bool) -> None:
    """Registers current shipped templates; builds missing ones first when ``build``."""
    base_url = config.runtime.docker.base_url
    try:
        client = docker.DockerClient(base_url=base_url) if base_url else docker.from_env()
        client.ping()
    except docker.errors.DockerException as exc:
        if config.runtime.kind == "docker":
            raise RuntimeUnavailable(f"Docker engine unreachable ({exc}): start dockerd") from None
        _ensure_native(config, store, build=build)
        return
    settings = config.templates
    try:
        probe = TemplateBuilder(client, source=settings.source, mirror=settings.mirror)
        missing = [name for name in SHIPPED_TEMPLATES if probe.status(name) is None]
        if missing and build:
            err_console.print(f"Building templates on first run: {', '.join(missing)}")
            with _ProgressView() as view:
                builder = TemplateBuilder(
                    client,
                    source=settings.source,
                    mirror=settings.mirror,
                    on_progress=view.update,
                )
                builder.ensure(missing)
        for name in SHIPPED_TEMPLATES:
            built = probe.status(name)
            if built is not None:
                labels = client.images.get(built.image_id).labels or {}
                spec = SHIPPED_TEMPLATES[name]
                register(
                    store, built, labels=labels, cpu_count=spec.cpu_count, memory_mb=spec.memory_mb
                )
                _prepare_tree(config, name, built.image_ref, built.image_id)
            else:
                err_console.print(
                    f"template {name} is not built: `sandgate templates build {name}`"
                )
    except BuilderError as exc:
        raise TemplateBuildError(str(exc)) from None
    finally:
        client.close()


def _prepare_tree(config: Config, name: str, image_ref: str, image_id: str) -> None:
    """Exports the template's image to the root file system cache now, once per image, so the
    first sandbox does not wait for it (every sandbox's root is a layer over that tree)."""
    meta = config.rootfs_dir / f"{image_id.removeprefix('sha256:')}.json"
    if meta.is_file():
        return
    err_console.print(f"Preparing the root file system of {name} (once per image)...")
    try:
        resolve_rootfs(image_ref, config.rootfs_dir, config.runtime.docker.base_url)
    except RuntimeUnavailable as exc:
        err_console.print(f"[yellow]not prepared ({exc.message}); the first sandbox will retry[/]")


def _ensure_native(config: Config, store: Store, *, build: bool) -> None:
    rootfs_dir = config.rootfs_dir
    mirror = config.templates.mirror
    try:
        probe = NativeTemplateBuilder(rootfs_dir, mirror=mirror)
        missing = [name for name in SHIPPED_TEMPLATES if probe.status(name) is None]
        if missing and build:
            err_console.print(
                f"No container engine: building templates as root file systems in {rootfs_dir}: "
                f"{', '.join(missing)}"
            )
            with _ProgressView() as view:
                NativeTemplateBuilder(rootfs_dir, mirror=mirror, on_progress=view.update).ensure(
                    missing
                )
        for name in SHIPPED_TEMPLATES:
            built = probe.status(name)
            if built is not None:
                spec = SHIPPED_TEMPLATES[name]
                register(
                    store,
                    built,
                    labels=probe.labels(built),
                    cpu_count=spec.cpu_count,
                    memory_mb=spec.memory_mb,
                )
            else:
                err_console.print(
                    f"template {name} is not built: `sandgate templates build {name}`"
                )
    except BuilderError as exc:
        raise TemplateBuildError(str(exc)) from None
