"""What the shipped templates are and where their build contexts live."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from pathlib import Path
from types import MappingProxyType

__all__ = ["SHIPPED_TEMPLATES", "TemplateSpec", "default_images_dir"]


@dataclasses.dataclass(frozen=True, slots=True)
class TemplateSpec:
    """A template shipped with Sandgate.

    ``context`` is the Dockerfile directory, relative to the images directory. A template
    with ``parent=None`` starts from a Debian root filesystem and lists the packages it
    needs in ``<context>/packages.txt`` (see ``images/base/packages.txt``); a template
    with a parent starts from that template's built image. Either way the Dockerfile
    receives the starting image as ``ARG BASE_IMAGE``.
    """

    name: str
    context: str
    description: str
    parent: str | None = None


SHIPPED_TEMPLATES: Mapping[str, TemplateSpec] = MappingProxyType(
    {
        "base": TemplateSpec(
            name="base",
            context="base",
            description="Debian bookworm with user 1000, bash, python3, git, curl, sudo",
        ),
        # "code-interpreter-v1" goes here (its own issue): a TemplateSpec with
        # context="code-interpreter-v1" and parent="base"; its Dockerfile in
        # images/code-interpreter-v1/ starts with `ARG BASE_IMAGE` / `FROM ${BASE_IMAGE}`
        # and the builder passes the built base image there.
    }
)


def default_images_dir() -> Path:
    """The directory holding the shipped templates' build contexts.

    ``images/`` at the root of a source checkout; an installed wheel carries it as
    ``sandgate/_images`` (force-included by the packaging configuration).
    """
    package_dir = Path(__file__).resolve().parent.parent
    for candidate in (package_dir / "_images", package_dir.parent.parent / "images"):
        if (candidate / "base" / "Dockerfile").is_file():
            return candidate
    return package_dir.parent.parent / "images"
