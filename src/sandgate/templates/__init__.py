"""Shipped templates and how they are built.

``TemplateBuilder(docker.from_env()).build("base")`` produces
``sandgate/template-base:latest``: Debian bookworm with user ``user`` (1000:1000), bash,
python3, git, curl, procps, sudo and ca-certificates, from either ``debian:bookworm-slim``
or an offline debootstrap (``Source``). Builds are idempotent: an image whose content
digest matches is reused. Without a container engine, ``NativeTemplateBuilder`` builds the
same templates as root-filesystem directories for the bwrap runtime.

Team templates (the E2B template API) are built by ``builds.BuildService`` from the steps the
E2B SDKs send (``_plan``), one cached layer per step (``_layers``), on Docker
(``_docker_layers``) or without an engine (``_native_layers``); E2B's v1 builds start from an
image ``docker push``ed to the server (``_pushed``).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ._builder import BuiltTemplate, TemplateBuilder, TemplateState
    from ._engines import layer_backend, prepare_template_tree, remove_stale_builds
    from ._native import NativeTemplateBuilder
    from ._progress import BuildStep, ProgressCallback, ignore_progress
    from ._pushed import PushRefused, PushStore, check_digest
    from ._rootfs import DEFAULT_MIRROR
    from ._sources import Source
    from ._spec import SHIPPED_TEMPLATES, TemplateSpec
    from .errors import TemplateBuildError

#: Where each name lives: the package loads a submodule on first use, so the CLI (which
#: registers every command at start) and a bwrap-only server don't pay for the Docker SDK
#: and the builders unless they build.
_WHERE = {
    "BuiltTemplate": "._builder",
    "TemplateBuilder": "._builder",
    "TemplateState": "._builder",
    "layer_backend": "._engines",
    "prepare_template_tree": "._engines",
    "remove_stale_builds": "._engines",
    "NativeTemplateBuilder": "._native",
    "BuildStep": "._progress",
    "ProgressCallback": "._progress",
    "ignore_progress": "._progress",
    "PushRefused": "._pushed",
    "PushStore": "._pushed",
    "check_digest": "._pushed",
    "DEFAULT_MIRROR": "._rootfs",
    "Source": "._sources",
    "SHIPPED_TEMPLATES": "._spec",
    "TemplateSpec": "._spec",
    "TemplateBuildError": ".errors",
}


def __getattr__(name: str) -> Any:
    where = _WHERE.get(name)
    if where is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(where, __name__), name)
    globals()[name] = value
    return value


__all__ = [
    "DEFAULT_MIRROR",
    "SHIPPED_TEMPLATES",
    "BuildStep",
    "BuiltTemplate",
    "NativeTemplateBuilder",
    "ProgressCallback",
    "PushRefused",
    "PushStore",
    "Source",
    "TemplateBuildError",
    "TemplateBuilder",
    "TemplateSpec",
    "TemplateState",
    "check_digest",
    "ignore_progress",
    "layer_backend",
    "prepare_template_tree",
    "remove_stale_builds",
]
