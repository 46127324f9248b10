"""The approvals service a configuration describes (``serve``, ``sandgate run``, the CLI)."""

from __future__ import annotations

from sandgate.approvals.service import ApprovalService
from sandgate.approvals.webhooks import WebhookNotifier
from sandgate.config import Config
from sandgate.secrets import SecretStore

__all__ = ["build_approvals"]


def build_approvals(config: Config, secrets: SecretStore) -> ApprovalService:
    """With a webhook notifier when ``approvals.webhook_url`` is set; its signing secret is
    read at each send (a secret that cannot be read fails that delivery, never sends it
    unsigned)."""
    settings = config.approvals
    notifier = None
    if settings.webhook_url:
        name = settings.webhook_secret

        def secret() -> str | None:
            return None if name is None else secrets.resolve([name])[name]

        notifier = WebhookNotifier(settings.webhook_url, secret)
    return ApprovalService(
        config.home_dir / "approvals", timeout_s=settings.timeout_s, notifier=notifier
    )
