"""The installation's token signing key: an EC P-256 key in ``<home>/identity/``.

``signing-key.pem`` signs; ``signing-key.previous.pem``, when an operator has moved the old
key there to rotate (docs/operations.md), is still published in the JWKS so tokens it signed
verify until they expire, but never signs again.

SECURITY: whoever holds the key can mint tokens for any sandbox of this installation, for any
audience. It is created 0600 in a 0700 directory, written atomically (a crash leaves no half
key), and a key file others can read is refused rather than used.
"""

from __future__ import annotations

import base64
import hashlib
import json
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec

from sandgate.errors import ConfigError
from sandgate.secrets.keyfile import install_file

__all__ = ["CURRENT_KEY", "PREVIOUS_KEY", "SigningKey", "load_signing_keys"]

CURRENT_KEY: Final = "signing-key.pem"
PREVIOUS_KEY: Final = "signing-key.previous.pem"


@dataclass(frozen=True)
class SigningKey:
    """A P-256 key with its public JWK and ``kid`` (the RFC 7638 thumbprint)."""

    private: ec.EllipticCurvePrivateKey
    kid: str
    jwk: dict[str, str]

    @classmethod
    def of(cls, private: ec.EllipticCurvePrivateKey) -> SigningKey:
        numbers = private.public_key().public_numbers()
        members = {
            "crv": "P-256",
            "kty": "EC",
            "x": _b64(numbers.x.to_bytes(32, "big")),
            "y": _b64(numbers.y.to_bytes(32, "big")),
        }
        # RFC 7638: the required members, sorted, no whitespace, hashed with SHA-256.
        canonical = json.dumps(members, sort_keys=True, separators=(",", ":")).encode()
        kid = _b64(hashlib.sha256(canonical).digest())
        return cls(private, kid, {**members, "kid": kid, "use": "sig", "alg": "ES256"})


def load_signing_keys(directory: Path) -> tuple[SigningKey, SigningKey | None]:
    """The current key (created on first use) and the previous one, if any. Raises
    ``ConfigError`` for a key file that others can read or that is not a P-256 key."""
    current = directory / CURRENT_KEY
    install_file(current, _new_pem)  # created on first use, atomically, 0600
    previous = directory / PREVIOUS_KEY
    return _read(current), (_read(previous) if previous.exists() else None)


def _new_pem() -> bytes:
    return ec.generate_private_key(ec.SECP256R1()).private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )


def _read(path: Path) -> SigningKey:
    mode = path.stat().st_mode
    if mode & (stat.S_IRWXG | stat.S_IRWXO):
        raise ConfigError(
            f"identity signing key {path} is readable by others (mode {stat.S_IMODE(mode):o}); "
            f"run 'chmod 600 {path}' (and rotate the key if it may have leaked)"
        )
    try:
        key = serialization.load_pem_private_key(path.read_bytes(), password=None)
    except (ValueError, TypeError) as exc:
        raise ConfigError(
            f"identity signing key {path} is not an unencrypted PEM private key: {exc}; "
            "move it away to have a new one made"
        ) from None
    if not isinstance(key, ec.EllipticCurvePrivateKey) or key.curve.name != "secp256r1":
        raise ConfigError(f"identity signing key {path} is not an EC P-256 key")
    return SigningKey.of(key)


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()
