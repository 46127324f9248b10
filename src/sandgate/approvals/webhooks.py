"""Signed webhook notifications of approvals: requested, decided, expired.

Each notification is one POST of a JSON body ``{"event", "approval", "sent_at"}`` with::

    X-Sandgate-Event:      approval.requested | approval.decided | approval.expired
    X-Sandgate-Delivery:   a random id, the same on every retry of one notification
    X-Sandgate-Timestamp:  Unix seconds when it was signed
    X-Sandgate-Signature:  v1=<hex HMAC-SHA256(secret, "<timestamp>." + body)>

The receiver recomputes the signature over the exact bytes it received, compares in constant
time, and refuses a timestamp more than a few minutes old (a replayed notification). The
secret is ``approvals.webhook_secret`` (a name in ``secrets:``), read at each send so a rotated
file takes effect at once; without one notifications go unsigned (no signature header).

Delivery never delays a tool call or a decision: notifications are sent by a small pool of
worker threads, each tried up to ``ATTEMPTS`` times with growing pauses; failures are logged.
A process that exits (the CLI) first finishes what is queued.

Trust: the receiver is operator-configured; what it gets is what the approvals API shows
(arguments already redacted by the pipeline). Its answer is ignored: an approver decides
through the API with its own key (``sandgate keys create --scope approvals``).
"""

from __future__ import annotations

import hashlib
import hmac
import json
import secrets
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from datetime import UTC, datetime
from typing import Any

import httpx
import structlog

from sandgate._outbound_tls import outbound_context

__all__ = ["ATTEMPTS", "WebhookNotifier", "sign"]

log = structlog.get_logger("sandgate.approvals")

ATTEMPTS = 4
_TIMEOUT_S = 5.0
_FIRST_PAUSE_S = 0.5


def sign(secret: bytes, timestamp: str, body: bytes) -> str:
    """The ``X-Sandgate-Signature`` value of ``body`` sent at ``timestamp``."""
    digest = hmac.new(secret, timestamp.encode() + b"." + body, hashlib.sha256).hexdigest()
    return f"v1={digest}"


class WebhookNotifier:
    def __init__(self, url: str, secret: Callable[[], str | None]) -> None:
        """``secret()`` returns the signing secret at send time (None: unsigned)."""
        self._url = url
        self._secret = secret
        self._pool = ThreadPoolExecutor(max_workers=2, thread_name_prefix="sandgate-webhook")

    def notify(self, event: str, approval: dict[str, Any]) -> Future[bool]:
        """Queues one notification; the future says whether it was delivered (2xx)."""
        body = json.dumps(
            {"event": event, "approval": approval, "sent_at": datetime.now(UTC).isoformat()},
            sort_keys=True,
            separators=(",", ":"),
        ).encode()
        delivery = secrets.token_hex(12)
        return self._pool.submit(self._deliver, event, body, delivery, approval.get("id"))

    def close(self) -> None:
        """Waits for queued notifications (each bounded by its attempts)."""
        self._pool.shutdown(wait=True)

    def _deliver(self, event: str, body: bytes, delivery: str, approval_id: object) -> bool:
        pause = _FIRST_PAUSE_S
        for attempt in range(1, ATTEMPTS + 1):
            timestamp = str(int(time.time()))
            headers = {
                "Content-Type": "application/json",
                "X-Sandgate-Event": event,
                "X-Sandgate-Delivery": delivery,
                "X-Sandgate-Timestamp": timestamp,
            }
            try:
                secret = self._secret()
                if secret:
                    headers["X-Sandgate-Signature"] = sign(secret.encode(), timestamp, body)
                response = httpx.post(
                    self._url,
                    content=body,
                    headers=headers,
                    timeout=_TIMEOUT_S,
                    trust_env=False,
                    verify=outbound_context(),
                )
                if response.is_success:
                    return True
                problem = f"HTTP {response.status_code}"
            except Exception as exc:  # the receiver is out of our hands: log and retry
                problem = repr(exc)[:200]
            log.warning(
                "approval.webhook_failed",
                approval=approval_id,
                webhook_event=event,
                attempt=attempt,
                error=problem,
            )
            if attempt < ATTEMPTS:
                time.sleep(pause)
                pause *= 2
        return False
