"""API keys and access tokens.

SECURITY: keys are stored only as SHA-256 digests (they are 160 random bits, so a plain hash
is enough; no salt or KDF is needed against guessing). Comparisons of presented secrets use
``hmac.compare_digest``. A revoked key fails exactly like an unknown one, so responses do not
tell an attacker which keys exist (AUTH-02).

Scopes: a key made with ``scopes`` (``sandgate keys create --scope approvals``) may only do
what those scopes name, for its own team; every other route refuses it with 403. A key
without scopes may do everything its team may. Routes state the scope they accept when they
authenticate (``authenticate_api_key(..., scope=...)``); the default accepts only full keys.
A ``read`` key signs in to the web console (``sandgate.console``), which shows it every page
and refuses it every action.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import secrets
from dataclasses import dataclass
from datetime import UTC, datetime

from sandgate.errors import Forbidden, InvalidRequest, Unauthenticated
from sandgate.store import ApiKey, Store

_KEY_PREFIX = "e2b_"
#: Scopes a key can be limited to, and what each allows.
SCOPES = {
    "approvals": "list and decide the team's approvals (an approver service)",
    "read": "sign in to the web console read-only: see the team's pages, take no action",
}
_INVALID_KEY = "Invalid API key: check E2B_API_KEY (create one with `sandgate keys create`)"


@dataclass(frozen=True)
class Principal:
    """The caller of a control-plane request, as established by its API key. ``scopes`` is
    None for a full key, else the only scopes it has."""

    team_id: str
    api_key_id: str
    scopes: frozenset[str] | None = None


def hash_secret(value: str) -> str:
    return hashlib.sha256(value.encode()).hexdigest()


def tokens_equal(presented: str | None, expected: str) -> bool:
    return presented is not None and hmac.compare_digest(presented.encode(), expected.encode())


def new_access_token() -> str:
    """A sandbox's envd access token: header-safe, 256 random bits."""
    return secrets.token_urlsafe(32)


def traffic_token(access_token: str) -> str:
    """A sandbox's token for its other ports (E2B's ``trafficAccessToken``).

    Derived from the envd access token with HMAC, so it needs no storage and survives
    restarts, while knowing it reveals nothing of the access token (it grants ports only)."""
    digest = hmac.new(access_token.encode(), b"sandgate traffic token v1", hashlib.sha256)
    return base64.urlsafe_b64encode(digest.digest()).decode().rstrip("=")


def create_api_key(
    store: Store, team: str, name: str, scopes: frozenset[str] | None = None
) -> tuple[ApiKey, str]:
    """Creates a key for ``team`` (creating the team), limited to ``scopes`` if given;
    returns the row and the only copy of the key. Keys are ``e2b_`` + 40 hex so every SDK
    version's key check accepts them. Raises ``InvalidRequest`` for an unknown scope."""
    unknown = sorted((scopes or frozenset()) - set(SCOPES))
    if unknown or scopes == frozenset():
        raise InvalidRequest(
            f"unknown scope {', '.join(unknown) or '(empty)'}: scopes are "
            + "; ".join(f"{name} ({what})" for name, what in SCOPES.items())
        )
    now = datetime.now(UTC)
    team_row = store.get_or_create_team(team, "team_" + secrets.token_hex(8), now)
    plaintext = _KEY_PREFIX + secrets.token_hex(20)
    row = ApiKey(
        id="key_" + secrets.token_hex(6),
        team_id=team_row.id,
        name=name,
        prefix=plaintext[:10],
        key_hash=hash_secret(plaintext),
        created_at=now,
        revoked_at=None,
        last_used_at=None,
        scopes=",".join(sorted(scopes)) if scopes else None,
    )
    store.add_api_key(row)
    return row, plaintext


def authenticate_api_key(
    store: Store, presented: str | None, *, scope: str | None = None
) -> Principal:
    """Returns the principal of a valid, unrevoked key that may use a route of ``scope``
    (None: only full keys may). Raises ``Unauthenticated``, or ``Forbidden`` for a key whose
    scopes do not include ``scope``."""
    if not presented:
        raise Unauthenticated("Missing API key: set E2B_API_KEY (see `sandgate env`)")
    if presented != presented.strip():
        raise Unauthenticated(_INVALID_KEY)
    return authenticate_key_hash(store, hash_secret(presented), scope=scope)


def authenticate_key_hash(store: Store, key_hash: str, *, scope: str | None = None) -> Principal:
    """``authenticate_api_key`` for a key known by its digest (a console session keeps the
    digest, never the key, and checks it again on every request, so a revoked key's
    sessions end at once). Raises ``Unauthenticated`` or ``Forbidden`` as that does."""
    row = store.api_key_by_hash(key_hash)
    if row is None or row.revoked_at is not None:
        raise Unauthenticated(_INVALID_KEY)
    scopes = frozenset(row.scopes.split(",")) if row.scopes else None
    # SECURITY: a scoped key is refused everywhere but the routes of its scopes.
    if scopes is not None and (scope is None or scope not in scopes):
        raise Forbidden(
            f"API key {row.id} is limited to {', '.join(sorted(scopes))} "
            f"({'; '.join(SCOPES.get(s, s) for s in sorted(scopes))}); use a full key here"
        )
    return Principal(team_id=row.team_id, api_key_id=row.id, scopes=scopes)
