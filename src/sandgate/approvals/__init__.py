"""Pending ``ask`` decisions: a person approves or denies; silence denies."""

from sandgate.approvals.service import Approval, ApprovalService, ApprovalState

__all__ = ["Approval", "ApprovalService", "ApprovalState"]
