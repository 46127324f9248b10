"""The workload identity issuer: JWT-SVIDs for sandboxes, and what relying parties need to
verify them (an OpenID discovery document and the JWKS).

A token says "sandbox <id> of team <team>, of this installation" to one audience, for a few
minutes::

    header  {"alg": "ES256", "kid": <RFC 7638 thumbprint>, "typ": "JWT"}
    claims  {"iss": <issuer>, "sub": "spiffe://<trust domain>/team/<team>/sandbox/<id>",
             "aud": [<audience>], "iat", "nbf", "exp": iat + ttl, "jti": <random>}

Trust: the issuer trusts its caller (the egress proxy) to ask only for tokens a sandbox's
create call registered, and only on the way to a host a rule names over verified TLS
(``egress.transforms``). It never hands a token to the sandbox itself. Tokens are cached per
(sandbox, name, audience) and re-minted when less than a quarter of their lifetime is left,
so a relying party sees a fresh token on each minting, never an expired one.
"""

from __future__ import annotations

import secrets
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final
from urllib.parse import quote

import jwt

from sandgate.config import Config
from sandgate.config._identity import check_issuer, check_trust_domain
from sandgate.errors import ConfigError
from sandgate.identity.keys import SigningKey, load_signing_keys

__all__ = ["ALGORITHM", "JWKS_PATH", "OPENID_CONFIGURATION_PATH", "Issuer", "SandboxTokens"]

ALGORITHM: Final = "ES256"
OPENID_CONFIGURATION_PATH: Final = "/.well-known/openid-configuration"
JWKS_PATH: Final = "/.well-known/jwks.json"


@dataclass(frozen=True)
class _Minted:
    token: str
    expires: float


class Issuer:
    """Signs tokens with the installation's key (``keys``); one per server."""

    def __init__(
        self,
        issuer: str,
        trust_domain: str,
        key_dir: Path,
        *,
        ttl_s: int = 300,
        clock: Callable[[], float] = time.time,
    ) -> None:
        """Loads (or, the first time, creates) the signing key in ``key_dir``. Raises
        ``ValueError`` for a bad issuer or trust domain and ``ConfigError`` for a key file
        that cannot be used."""
        self.issuer = check_issuer(issuer)
        self.trust_domain = check_trust_domain(trust_domain)
        self.ttl_s = ttl_s
        self._clock = clock
        self._key, self._previous = load_signing_keys(key_dir)
        self._cache: dict[tuple[str, str, str], list[_Minted]] = {}

    @classmethod
    def from_config(cls, config: Config) -> Issuer:
        """The issuer ``config.identity`` describes; the defaults follow ``server``: issuer
        ``https://api.<domain>`` over TLS (``http://api.<domain>:<port>`` without), trust
        domain ``server.domain``. The key lives in ``<home>/identity``. Raises
        ``ConfigError``."""
        server, identity = config.server, config.identity
        issuer = identity.issuer
        if not issuer:
            port = server.public_port or server.port
            issuer = (
                f"https://api.{server.sandbox_domain}"
                if server.tls.enabled
                else f"http://api.{server.domain}:{port}"
            )
        trust_domain = identity.trust_domain or server.domain.rstrip(".").lower()
        try:
            return cls(
                issuer, trust_domain, config.home_dir / "identity", ttl_s=identity.token_ttl_s
            )
        except ValueError as exc:
            raise ConfigError(
                f"identity: {exc} (derived from server.domain; set identity.issuer and "
                "identity.trust_domain)"
            ) from None

    @property
    def kid(self) -> str:
        return self._key.kid

    def discovery(self) -> dict[str, Any]:
        """The OpenID discovery document (the fields relying parties such as AWS STS or
        Kubernetes read to find the keys)."""
        return {
            "issuer": self.issuer,
            "jwks_uri": self.issuer + JWKS_PATH,
            "response_types_supported": ["id_token"],
            "subject_types_supported": ["public"],
            "id_token_signing_alg_values_supported": [ALGORITHM],
        }

    def jwks(self) -> dict[str, Any]:
        """The public keys: the signing one, then the previous one while it is kept."""
        keys: list[SigningKey] = [self._key] + ([self._previous] if self._previous else [])
        return {"keys": [dict(key.jwk) for key in keys]}

    def subject(self, team_id: str, sandbox_id: str) -> str:
        """The SPIFFE id of a sandbox."""
        team, sandbox = quote(team_id, safe=""), quote(sandbox_id, safe="")
        return f"spiffe://{self.trust_domain}/team/{team}/sandbox/{sandbox}"

    def for_sandbox(
        self, sandbox_id: str, team_id: str, tokens: Mapping[str, str]
    ) -> SandboxTokens:
        """The tokens one sandbox registered (name → audience), minted on demand."""
        return SandboxTokens(self, sandbox_id, team_id, dict(tokens))

    def forget(self, sandbox_id: str) -> None:
        """Drops a sandbox's cached tokens (it stopped, or its registration changed)."""
        for key in [k for k in self._cache if k[0] == sandbox_id]:
            del self._cache[key]

    def token(self, sandbox_id: str, team_id: str, name: str, audience: str) -> str:
        """A valid token for (sandbox, name, audience): the cached one while it has more
        than a quarter of its lifetime left, else a new one."""
        now = self._clock()
        key = (sandbox_id, name, audience)
        minted = [m for m in self._cache.get(key, []) if m.expires > now]
        if minted and minted[-1].expires - now > self.ttl_s / 4:
            self._cache[key] = minted
            return minted[-1].token
        fresh = self._mint(self.subject(team_id, sandbox_id), audience, now)
        # The older ones stay until they expire: a response may still reflect them.
        self._cache[key] = [*minted, fresh]
        return fresh.token

    def live_tokens(self, sandbox_id: str) -> list[str]:
        """Every unexpired token minted for a sandbox (to mask in what flows back)."""
        now = self._clock()
        return [
            m.token
            for key, minted in self._cache.items()
            if key[0] == sandbox_id
            for m in minted
            if m.expires > now
        ]

    def _mint(self, subject: str, audience: str, now: float) -> _Minted:
        issued = int(now)
        claims = {
            "iss": self.issuer,
            "sub": subject,
            "aud": [audience],
            "iat": issued,
            "nbf": issued,
            "exp": issued + self.ttl_s,
            "jti": secrets.token_urlsafe(16),
        }
        token = jwt.encode(
            claims, self._key.private, algorithm=ALGORITHM, headers={"kid": self._key.kid}
        )
        return _Minted(token, issued + self.ttl_s)


class SandboxTokens:
    """One sandbox's registered tokens, as the egress proxy uses them."""

    def __init__(
        self, issuer: Issuer, sandbox_id: str, team_id: str, tokens: dict[str, str]
    ) -> None:
        self._issuer = issuer
        self._sandbox = sandbox_id
        self._team = team_id
        self._tokens = tokens

    @property
    def names(self) -> list[str]:
        return list(self._tokens)

    def token(self, name: str) -> str:
        """The current token for ``name``; raises ``KeyError`` for a name not registered."""
        return self._issuer.token(self._sandbox, self._team, name, self._tokens[name])

    def values(self) -> list[bytes]:
        return [token.encode() for token in self._issuer.live_tokens(self._sandbox)]
