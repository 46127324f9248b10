"""Sandbox lifecycle, reaper, reattach and data-plane routing."""

from sandgate.sandboxes.hooks import LifecycleObserver, SandboxHook
from sandgate.sandboxes.service import CreateRequest, Route, SandboxService
from sandgate.sandboxes.state import SandboxState, check_transition

__all__ = [
    "CreateRequest",
    "LifecycleObserver",
    "Route",
    "SandboxHook",
    "SandboxService",
    "SandboxState",
    "check_transition",
]
