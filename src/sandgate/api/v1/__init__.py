"""Sandgate's own HTTP API under ``/v1`` (tools, policy, approvals, audit)."""

from sandgate.api.v1.gateway import build_v1_router

__all__ = ["build_v1_router"]
