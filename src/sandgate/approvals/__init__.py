"""Pending ``ask`` decisions: a person approves or denies; silence denies. Every transition is
announced to an optional signed webhook."""

from sandgate.approvals._build import build_approvals
from sandgate.approvals.service import Approval, ApprovalService, ApprovalState
from sandgate.approvals.webhooks import WebhookNotifier, sign

__all__ = [
    "Approval",
    "ApprovalService",
    "ApprovalState",
    "WebhookNotifier",
    "build_approvals",
    "sign",
]
