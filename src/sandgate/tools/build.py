"""Assembling a gateway from the configuration (used by ``serve`` and ``sandgate run``)."""

from __future__ import annotations

from sandgate.approvals import ApprovalService
from sandgate.audit import AuditLog
from sandgate.config import Config
from sandgate.policy import PolicyEngine
from sandgate.secrets import SecretStore
from sandgate.store import Store
from sandgate.tools.pipeline import Gateway
from sandgate.tools.registry import ToolRegistry


def build_gateway(config: Config, store: Store | None) -> Gateway:
    """Builds every gateway service from ``config``; MCP tools load later (``load_mcp``)."""
    home = config.home_dir
    return Gateway(
        registry=ToolRegistry(config.tools, home),
        policy=PolicyEngine(config.policy),
        approvals=ApprovalService(
            home / "approvals",
            timeout_s=config.approvals.timeout_s,
            webhook_url=config.approvals.webhook_url,
        ),
        secrets=SecretStore(config.secrets),
        audit=AuditLog(home / "audit", store, fsync=config.audit.fsync),
        home=home,
        budget_per_sandbox=config.policy.budget_per_sandbox,
    )
