"""The callback through which a build reports progress to whoever renders it."""

from __future__ import annotations

import enum
from typing import Protocol

__all__ = ["BuildStep", "ProgressCallback", "ignore_progress"]


class BuildStep(enum.StrEnum):
    """The stages of a template build, in the order they may happen."""

    RESOLVE = "resolve"
    """Finding the starting image (local lookup)."""
    PULL = "pull"
    """Pulling the public base image from a registry."""
    DEBOOTSTRAP = "debootstrap"
    """Bootstrapping a Debian root filesystem offline (well, from a Debian mirror)."""
    IMPORT = "import"
    """Streaming that root filesystem into ``docker import``."""
    BUILD = "build"
    """Running the template's Dockerfile."""


class ProgressCallback(Protocol):
    """Receives progress; called synchronously from the building thread.

    ``fraction`` is how much of ``step`` is done, in [0, 1], or ``None`` when unknown
    (render an indeterminate bar). ``1.0`` marks the step finished. ``message`` is a
    short human line such as ``"Step 3/7 : RUN ..."``. Implementations must be quick and
    must not raise.
    """

    def __call__(self, step: BuildStep, fraction: float | None, message: str) -> None: ...


def ignore_progress(step: BuildStep, fraction: float | None, message: str) -> None:
    """A ``ProgressCallback`` that drops everything."""
