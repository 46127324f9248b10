"""Sandbox backends behind one protocol."""

from sandgate.runtimes._rootfs import by_name_dir, resolve_rootfs
from sandgate.runtimes.base import (
    GUEST_ARCHIVE,
    GUEST_DIR_IN_SANDBOX,
    Runtime,
    RuntimeSandbox,
    RuntimeState,
    SandboxSpec,
    SandboxStats,
    VolumeMount,
    sandbox_seeds,
)

__all__ = [
    "GUEST_ARCHIVE",
    "GUEST_DIR_IN_SANDBOX",
    "Runtime",
    "RuntimeSandbox",
    "RuntimeState",
    "SandboxSpec",
    "SandboxStats",
    "VolumeMount",
    "by_name_dir",
    "resolve_rootfs",
    "sandbox_seeds",
]
