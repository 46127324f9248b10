"""Team secrets (E2B's ``/secrets``, the SDK's ``Secret``): values a team stores through the API
and its sandboxes *use* but never read.

A sandbox refers to a secret by the placeholder ``${e2b.secrets.<name>}`` in a header of its
``network.rules`` (create or ``update_network``); the egress proxy renders the header for the
rule's host only, over TLS it verifies, and masks the value in anything flowing back
(``egress.transforms``). The sandbox, its environment and its files never hold the value.

Trust: API callers are trusted with their own team's secrets and nothing else (a secret of
another team is "not found"). Values are write-only: accepted by create and update, never
returned by any read. At rest they are AES-256-GCM ciphertext under a per-install key
(``<home>/secrets/team-secrets.key``, 0600), the row's team, id and version bound in as
associated data, so a ciphertext copied onto another row (another team) does not decrypt.
Only ``resolve`` decrypts, for the proxy, at the moment a request needs the value; names, never
values, go into audit records and logs.
"""

from __future__ import annotations

import base64
import re
import secrets as random
import string
from dataclasses import dataclass
from datetime import UTC, datetime
from functools import cached_property
from pathlib import Path
from typing import Any, Final

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from sandgate.errors import InvalidRequest, NotFound, QuotaExceeded
from sandgate.secrets.keyfile import install_key
from sandgate.store import SecretRecords, TeamSecret

__all__ = [
    "SECRET_REFERENCE",
    "SecretPage",
    "SecretUnreadable",
    "TeamSecrets",
    "canonical_secret_name",
]

#: A placeholder in a rule's header value: ``${e2b.secrets.<name>}``.
SECRET_REFERENCE: Final = re.compile(r"\$\{e2b\.secrets\.([^}]*)\}")
_ID_PREFIX: Final = "sec_"
_ID_ALPHABET: Final = string.ascii_lowercase + string.digits
_NAME_MAX: Final = 256
#: Characters a name may not hold: braces end the placeholder; controls are never names.
_BAD_NAME: Final = re.compile(r"[{}\x00-\x1f\x7f-\x9f]")
_VALUE_MAX: Final = 16 * 1024
#: What an HTTP header value cannot hold (RFC 9110 field-value: tab, visible, obs-text).
_NOT_IN_HEADER: Final = re.compile(r"[\x00-\x08\x0a-\x1f\x7f]")
_METADATA_ENTRIES: Final = 32
_METADATA_KEY_BYTES: Final = 128
_METADATA_VALUE_BYTES: Final = 1024
_METADATA_TOTAL_BYTES: Final = 8192
_PAGE_MAX: Final = 100
_NONCE_BYTES: Final = 12


class SecretUnreadable(Exception):
    """A secret cannot be used right now (deleted, or its ciphertext does not decrypt under
    this install's key); the message names the secret, never its value."""


@dataclass(frozen=True)
class SecretPage:
    secrets: list[TeamSecret]
    next_token: str | None


def canonical_secret_name(name: str) -> str:
    """``name`` as stored (lower case); raises ``InvalidRequest`` for an unusable one."""
    if not name or len(name) > _NAME_MAX or _BAD_NAME.search(name) or name != name.strip():
        raise InvalidRequest(
            f"secret name {name[:80]!r} is not usable: give 1..{_NAME_MAX} characters without "
            "'{', '}', control characters or surrounding spaces (it goes into the "
            "'${e2b.secrets.<name>}' placeholder)"
        )
    canonical = name.lower()
    if canonical.startswith(_ID_PREFIX):
        raise InvalidRequest(
            f"secret name {name[:80]!r} starts with '{_ID_PREFIX}', which is reserved for "
            "secret ids; pick another name"
        )
    return canonical


class TeamSecrets:
    """Create, read (metadata only), update, delete and resolve one team's secrets."""

    def __init__(self, records: SecretRecords, key_path: Path, *, max_per_team: int) -> None:
        self._records = records
        self._key_path = key_path
        self._max_per_team = max_per_team

    @cached_property
    def _cipher(self) -> AESGCM:
        return AESGCM(install_key(self._key_path))

    # -- API --------------------------------------------------------------------------------

    def create(
        self, team_id: str, name: str, value: str, metadata: dict[str, str] | None
    ) -> TeamSecret:
        """Stores a new secret at version 1. Raises ``InvalidRequest``, ``Conflict`` (the
        name is taken) and ``QuotaExceeded`` (``limits.max_secrets_per_team``)."""
        canonical = canonical_secret_name(name)
        _check_value(value)
        meta = _check_metadata(metadata or {})
        if self._records.count(team_id) >= self._max_per_team:
            raise QuotaExceeded(
                f"your team already has {self._max_per_team} secrets "
                "(limits.max_secrets_per_team); delete one first"
            )
        now = datetime.now(UTC)
        secret_id = _ID_PREFIX + "".join(random.choice(_ID_ALPHABET) for _ in range(24))
        row = TeamSecret(
            id=secret_id,
            team_id=team_id,
            name=canonical,
            current_version=1,
            metadata_=meta,
            ciphertext=self._seal(team_id, secret_id, 1, value),
            created_at=now,
            updated_at=now,
        )
        self._records.add(row)
        return row

    def update(
        self, team_id: str, ref: str, value: str, metadata: dict[str, str] | None
    ) -> TeamSecret:
        """Stores ``value`` as the secret's next version (``metadata``, when given, replaces
        the stored one). Raises ``NotFound`` and ``InvalidRequest``."""
        _check_value(value)
        meta = _check_metadata(metadata) if metadata is not None else None
        row = self.get(team_id, ref)
        version = row.current_version + 1
        values: dict[str, Any] = {
            "current_version": version,
            "ciphertext": self._seal(team_id, row.id, version, value),
            "updated_at": datetime.now(UTC),
        }
        if meta is not None:
            values["metadata_"] = meta
        updated = self._records.update(row.id, **values)
        if updated is None:
            raise _not_found(ref)
        return updated

    def get(self, team_id: str, ref: str) -> TeamSecret:
        """The secret whose id or name is ``ref``; raises ``NotFound``."""
        row = self._records.find(team_id, _lookup_key(ref))
        if row is None:
            raise _not_found(ref)
        return row

    def page(self, team_id: str, limit: int | None, next_token: str | None) -> SecretPage:
        """A page of the team's secrets by name; raises ``InvalidRequest`` for a bad limit."""
        size = _PAGE_MAX if limit is None else limit
        if not 1 <= size <= _PAGE_MAX:
            raise InvalidRequest(f"limit must be between 1 and {_PAGE_MAX}")
        rows = self._records.page(team_id, size + 1, next_token or None)
        more = len(rows) > size
        rows = rows[:size]
        return SecretPage(rows, rows[-1].name if more and rows else None)

    def delete(self, team_id: str, ref: str) -> None:
        """Destroys the secret and every version of it; raises ``NotFound``. Sandboxes whose
        rules name it get ``502 secret_unavailable`` from the proxy from then on."""
        row = self.get(team_id, ref)
        if not self._records.delete(row.id):
            raise _not_found(ref)

    # -- the proxy's side -------------------------------------------------------------------

    def missing(self, team_id: str, names: set[str]) -> list[str]:
        """Which of ``names`` (canonical) the team has no secret for."""
        if not names:
            return []
        found = {row.name for row in self._records.by_names(team_id, sorted(names))}
        return sorted(names - found)

    def resolve(self, team_id: str, name: str) -> str:
        """The current value of the team's secret ``name``; raises ``SecretUnreadable``."""
        row = self._records.find(team_id, name.lower())
        if row is None:
            raise SecretUnreadable(
                f"secret '{name}' does not exist (any more) in this sandbox's team"
            )
        try:
            return self._open(row)
        except (InvalidTag, ValueError):
            raise SecretUnreadable(
                f"secret '{name}' cannot be decrypted with this server's key "
                "(secrets/team-secrets.key was replaced?); store its value again"
            ) from None

    # -- sealing ----------------------------------------------------------------------------

    def _seal(self, team_id: str, secret_id: str, version: int, value: str) -> str:
        nonce = random.token_bytes(_NONCE_BYTES)
        sealed = self._cipher.encrypt(nonce, value.encode(), _bound(team_id, secret_id, version))
        return base64.b64encode(nonce + sealed).decode()

    def _open(self, row: TeamSecret) -> str:
        raw = base64.b64decode(row.ciphertext, validate=True)
        nonce, sealed = raw[:_NONCE_BYTES], raw[_NONCE_BYTES:]
        bound = _bound(row.team_id, row.id, row.current_version)
        return self._cipher.decrypt(nonce, sealed, bound).decode()


def _bound(team_id: str, secret_id: str, version: int) -> bytes:
    """The associated data of a ciphertext: which row (and version) it belongs to."""
    return f"sandgate team secret v1\0{team_id}\0{secret_id}\0{version}".encode()


def _lookup_key(ref: str) -> str:
    return ref if ref.startswith(_ID_PREFIX) else ref.lower()


def _not_found(ref: str) -> NotFound:
    return NotFound(f"secret '{ref[:200]}' not found in your team")


def _check_value(value: str) -> None:
    """SECURITY: a value is only ever sent in an HTTP header; one that could split a header
    (CR, LF), end a C string (NUL) or that HTTP would refuse is refused here, not at the first
    request (where an error quoting it could reach the sandbox)."""
    if not value:
        raise InvalidRequest("a secret's value must not be empty")
    if len(value.encode()) > _VALUE_MAX:
        raise InvalidRequest(f"a secret's value may hold at most {_VALUE_MAX} bytes")
    if _NOT_IN_HEADER.search(value) or value != value.strip(" \t"):
        raise InvalidRequest(
            "a secret's value cannot contain line breaks, control characters or surrounding "
            "spaces: it is sent in HTTP headers"
        )


def _check_metadata(metadata: dict[str, str]) -> dict[str, str]:
    if len(metadata) > _METADATA_ENTRIES:
        raise InvalidRequest(f"metadata may have at most {_METADATA_ENTRIES} entries")
    total = 0
    for key, value in metadata.items():
        key_bytes, value_bytes = len(key.encode()), len(value.encode())
        if not key or key_bytes > _METADATA_KEY_BYTES:
            raise InvalidRequest(f"metadata keys must have 1..{_METADATA_KEY_BYTES} bytes")
        if value_bytes > _METADATA_VALUE_BYTES:
            raise InvalidRequest(
                f"metadata value of '{key[:40]}' is longer than {_METADATA_VALUE_BYTES} bytes"
            )
        total += key_bytes + value_bytes
    if total > _METADATA_TOTAL_BYTES:
        raise InvalidRequest(f"a secret's metadata may hold at most {_METADATA_TOTAL_BYTES} bytes")
    return dict(metadata)
