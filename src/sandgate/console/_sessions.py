"""Console sign-in sessions: opaque, server-side, bound to an API key's digest.

Trust: the browser is trusted with nothing but a random session id. What is enforced here:

* The cookie holds 256 random bits and nothing else (never the key, never the team). The
  server keeps ``sha256(session id)`` → (the key's digest, a CSRF token, expiry), so a
  leaked memory dump of the table does not yield a usable cookie either.
* The key is checked again on every request (``authenticate_key_hash``): revoking a key ends
  its console sessions at once.
* Cookies are ``HttpOnly`` (no script reads them), ``SameSite=Strict`` (no cross-site request
  carries them), ``Path=/ui`` and ``Secure`` when the request came over HTTPS.
* Every state-changing request must carry the session's CSRF token (form field ``csrf`` or
  header ``X-CSRF-Token``), compared in constant time; SameSite is the first wall, the token
  the second.

Sessions live in memory: a restart signs everyone out, which is the safe failure.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
import threading
import time
from dataclasses import dataclass
from typing import Final

from sandgate.access import Principal, authenticate_key_hash
from sandgate.errors import SandgateError
from sandgate.store import Store

__all__ = ["COOKIE", "READ_SCOPE", "ConsoleSession", "SessionTable"]

COOKIE: Final = "sandgate_console"
READ_SCOPE: Final = "read"
#: A session ends this long after sign-in, whatever its use.
LIFETIME_S: Final = 12 * 3600


@dataclass(frozen=True)
class ConsoleSession:
    """One signed-in browser. ``read_only``: the key is scoped to ``read``."""

    principal: Principal
    key_hash: str
    csrf: str
    expires: float

    @property
    def read_only(self) -> bool:
        return self.principal.scopes is not None

    def csrf_ok(self, presented: str | None) -> bool:
        return presented is not None and hmac.compare_digest(presented.encode(), self.csrf.encode())


class SessionTable:
    """The server's sessions. Thread-safe: pages run in worker threads."""

    def __init__(self, store: Store) -> None:
        self._store = store
        self._sessions: dict[str, tuple[str, str, float]] = {}
        self._lock = threading.Lock()

    def open(self, key_hash: str) -> tuple[str, ConsoleSession]:
        """Starts a session for a key already authenticated by the caller; returns the
        cookie value and the session. Raises as ``authenticate_key_hash``."""
        principal = authenticate_key_hash(self._store, key_hash, scope=READ_SCOPE)
        cookie = secrets.token_urlsafe(32)
        csrf = secrets.token_urlsafe(32)
        expires = time.time() + LIFETIME_S
        with self._lock:
            self._drop_expired()
            self._sessions[_digest(cookie)] = (key_hash, csrf, expires)
        return cookie, ConsoleSession(principal, key_hash, csrf, expires)

    def get(self, cookie: str | None) -> ConsoleSession | None:
        """The live session of ``cookie``, its key checked again; None when there is none,
        it expired, or its key is revoked (the session is dropped then)."""
        if not cookie:
            return None
        digest = _digest(cookie)
        with self._lock:
            found = self._sessions.get(digest)
        if found is None:
            return None
        key_hash, csrf, expires = found
        if expires <= time.time():
            self.close(cookie)
            return None
        try:
            principal = authenticate_key_hash(self._store, key_hash, scope=READ_SCOPE)
        except SandgateError:  # any refusal of the key ends the session
            self.close(cookie)
            return None
        return ConsoleSession(principal, key_hash, csrf, expires)

    def close(self, cookie: str | None) -> None:
        """Ends a session; idempotent."""
        if cookie:
            with self._lock:
                self._sessions.pop(_digest(cookie), None)

    def _drop_expired(self) -> None:
        now = time.time()
        for digest in [d for d, (_, _, end) in self._sessions.items() if end <= now]:
            del self._sessions[digest]


def _digest(cookie: str) -> str:
    return hashlib.sha256(cookie.encode()).hexdigest()
