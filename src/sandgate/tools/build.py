"""Assembling a gateway from the configuration (used by ``serve`` and ``sandgate run``)."""

from __future__ import annotations

from sandgate.approvals import build_approvals
from sandgate.audit import build_audit
from sandgate.config import Config
from sandgate.policy import PolicyEngine
from sandgate.secrets import SecretStore
from sandgate.store import Store
from sandgate.tools.pipeline import Gateway
from sandgate.tools.registry import ToolRegistry
from sandgate.tools.scope import AgentScope


def build_gateway(config: Config, store: Store | None) -> Gateway:
    """Builds every gateway service from ``config``; MCP tools load later (``load_mcp``).
    Raises ``ToolFailed`` when the audit checkpoint's key secret cannot be read."""
    home = config.home_dir
    secrets = SecretStore(config.secrets)
    return Gateway(
        registry=ToolRegistry(config.tools, home),
        policy=PolicyEngine(config.policy),
        approvals=build_approvals(config, secrets),
        secrets=secrets,
        audit=build_audit(config, store, secrets),
        home=home,
        budget_per_sandbox=config.policy.budget_per_sandbox,
        scope=AgentScope(config.agents),
    )
