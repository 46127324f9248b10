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
    receives the starting image as ``ARG BASE_IMAGE``. ``vendored`` names Sandgate
    subpackages (``"interpreter"`` for ``sandgate.interpreter``) or stdlib-only modules
    (``"strictjson"``) that the builder copies into the context as
    ``_vendor/sandgate/<name>/`` or ``_vendor/sandgate/<name>.py`` (next to a stub
    ``_vendor/sandgate/__init__.py``), so in-sandbox services ship from this source tree.
    ``cpu_count`` and ``memory_mb`` are the size its sandboxes get unless a create asks
    otherwise (within ``limits``).
    """

    name: str
    context: str
    description: str
    parent: str | None = None
    vendored: tuple[str, ...] = ()
    cpu_count: int = 1
    memory_mb: int = 512


SHIPPED_TEMPLATES: Mapping[str, TemplateSpec] = MappingProxyType(
    {
        "base": TemplateSpec(
            name="base",
            context="base",
            description="Debian bookworm with user 1000, bash, python3, git, curl, sudo",
        ),
        "code-interpreter-v1": TemplateSpec(
            name="code-interpreter-v1",
            context="code-interpreter-v1",
            description="base plus numpy/pandas/matplotlib, Jupyter kernels (python, "
            "javascript/typescript, bash) and the code-interpreter server on port 49999",
            parent="base",
            vendored=("interpreter", "strictjson"),
            # Sized as E2B builds its own code-interpreter template. The second CPU is
            # what lets a fresh sandbox's kernel load while its server starts.
            cpu_count=2,
            memory_mb=2048,
        ),
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
