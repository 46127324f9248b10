"""Approvals: a tool call that the policy answered with ``ask`` waits here for a person.

State machine (one transition, then final)::

    pending ──approve──▶ approved
       │ ────deny─────▶ denied
       └──timeout─────▶ expired      (treated exactly like denied: never approved by default)

Approvals are files under ``$SANDGATE_HOME/approvals/`` so that ``sandgate approvals
approve`` works from another process (the CLI on the same host) as well as through the API.
Every transition happens under an ``flock`` and only from ``pending``, so a late approval
cannot revive an expired request, and an approval id is decided at most once (GW-16). The
waiting call notices an in-process decision at once and another process's within
``_POLL_S``. Trust: whoever can write this directory can approve; it is the gateway's home,
never mounted into a sandbox.

Every transition is announced to the configured webhook (``approvals.webhooks``: requested,
decided, expired; signed), by whichever process made it, without waiting for delivery.
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import fcntl
import json
import os
import secrets
from collections.abc import Iterator
from dataclasses import asdict, dataclass, replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import structlog

from sandgate._atomic import write_atomic
from sandgate.approvals.webhooks import WebhookNotifier
from sandgate.errors import Conflict, NotFound

__all__ = ["Approval", "ApprovalService", "ApprovalState"]

log = structlog.get_logger("sandgate.approvals")

_POLL_S = 0.1


class ApprovalState(enum.StrEnum):
    PENDING = "pending"  #: waiting for a person
    APPROVED = "approved"  #: final: the call runs
    DENIED = "denied"  #: final: the call is refused
    EXPIRED = "expired"  #: final: nobody answered in time; the call is refused


@dataclass(frozen=True)
class Approval:
    id: str
    state: ApprovalState
    sandbox_id: str
    subject: dict[str, Any]
    tool: str
    action: str | None
    #: Already redacted by the pipeline; shown to the person deciding.
    arguments: dict[str, Any]
    rule_id: str
    created_at: str
    expires_at: str
    decided_by: str | None = None
    decided_at: str | None = None

    def as_dict(self) -> dict[str, Any]:
        return {**asdict(self), "state": self.state.value}


class ApprovalService:
    def __init__(
        self, directory: Path, *, timeout_s: float, notifier: WebhookNotifier | None = None
    ) -> None:
        self._dir = directory
        self._timeout_s = timeout_s
        self._notifier = notifier
        self._events: dict[str, asyncio.Event] = {}

    async def request(
        self,
        *,
        sandbox_id: str,
        subject: dict[str, Any],
        tool: str,
        action: str | None,
        arguments: dict[str, Any],
        rule_id: str,
        timeout_s: float | None = None,
        approval_id: str | None = None,
    ) -> Approval:
        """Records a pending approval that expires after ``timeout_s`` (default: the
        service's) and announces it to the webhook (in the background). ``approval_id``
        (``apr_`` + letters and digits) lets a caller that may ask twice, such as a workflow
        step re-run after a crash, ask under the same id; it is refused (``Conflict``) once
        it exists."""
        now = datetime.now(UTC)
        approval = Approval(
            id=approval_id or "apr_" + secrets.token_hex(8),
            state=ApprovalState.PENDING,
            sandbox_id=sandbox_id,
            subject=subject,
            tool=tool,
            action=action,
            arguments=arguments,
            rule_id=rule_id,
            created_at=now.isoformat(),
            expires_at=(now + timedelta(seconds=timeout_s or self._timeout_s)).isoformat(),
        )
        self._path(approval.id)  # a malformed id is NotFound before anything is written
        self._events[approval.id] = asyncio.Event()
        with self._locked():
            if approval_id is not None and self._path(approval_id).exists():
                raise Conflict(f"approval {approval_id} exists already")
            self._write(approval)
        log.info("approval.pending", approval=approval.id, tool=tool, sandbox=sandbox_id)
        self._announce("approval.requested", approval)
        return approval

    async def wait(self, approval_id: str) -> Approval:
        """Waits until the approval is decided or expires; returns the final approval.

        Cancellation leaves it pending until it expires (a cancelled call never runs)."""
        event = self._events.setdefault(approval_id, asyncio.Event())
        try:
            while True:
                current = self.get(approval_id)
                if current.state is not ApprovalState.PENDING:
                    return current
                if datetime.now(UTC) >= datetime.fromisoformat(current.expires_at):
                    expired, changed = self._transition(
                        approval_id, ApprovalState.EXPIRED, "timeout"
                    )
                    if changed:
                        self._announce("approval.expired", expired)
                    return expired
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(_POLL_S):
                        await event.wait()
        finally:
            self._events.pop(approval_id, None)

    def decide(self, approval_id: str, *, approve: bool, by: str) -> Approval:
        """Approves or denies a pending approval. Raises ``NotFound``, or ``Conflict`` if it
        was already decided or expired."""
        state = ApprovalState.APPROVED if approve else ApprovalState.DENIED
        decided, changed = self._transition(approval_id, state, by)
        if not changed:
            raise Conflict(f"approval {approval_id} is already {decided.state.value}")
        event = self._events.get(approval_id)
        if event is not None:
            event.set()
        log.info("approval.decided", approval=approval_id, state=state.value, by=by)
        self._announce("approval.decided", decided)
        return decided

    def close(self) -> None:
        """Finishes sending queued notifications (a CLI process calls this before exit)."""
        if self._notifier is not None:
            self._notifier.close()

    def get(self, approval_id: str) -> Approval:
        path = self._path(approval_id)
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            raise NotFound(
                f"approval '{approval_id}' not found (see `sandgate approvals list`)"
            ) from None
        return Approval(**{**data, "state": ApprovalState(data["state"])})

    def list_approvals(self, state: ApprovalState | None = None) -> list[Approval]:
        """Oldest first; pending ones past their deadline are reported as pending until the
        waiting call (or its absence) expires them."""
        found = []
        if not self._dir.is_dir():
            return []
        for path in self._dir.glob("apr_*.json"):
            with contextlib.suppress(NotFound):
                approval = self.get(path.stem)
                if state is None or approval.state is state:
                    found.append(approval)
        return sorted(found, key=lambda a: a.created_at)

    def _transition(self, approval_id: str, state: ApprovalState, by: str) -> tuple[Approval, bool]:
        """Moves a pending approval to ``state``; returns the approval and whether it moved
        (False: it was already final)."""
        with self._locked():
            current = self.get(approval_id)
            if current.state is not ApprovalState.PENDING:
                return current, False
            decided = replace(
                current, state=state, decided_by=by, decided_at=datetime.now(UTC).isoformat()
            )
            self._write(decided)
            return decided, True

    def _path(self, approval_id: str) -> Path:
        if not approval_id.startswith("apr_") or not approval_id[4:].isalnum():
            raise NotFound(f"approval '{approval_id}' not found")
        return self._dir / f"{approval_id}.json"

    def _write(self, approval: Approval) -> None:
        path = self._path(approval.id)
        write_atomic(path, json.dumps(approval.as_dict()))

    @contextlib.contextmanager
    def _locked(self) -> Iterator[None]:
        self._dir.mkdir(parents=True, exist_ok=True, mode=0o700)
        fd = os.open(self._dir / ".lock", os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)

    def _announce(self, event: str, approval: Approval) -> None:
        if self._notifier is None:
            return
        try:
            self._notifier.notify(event, approval.as_dict())
        except RuntimeError:  # closed: this process is exiting
            log.warning("approval.webhook_skipped", approval=approval.id, webhook_event=event)
