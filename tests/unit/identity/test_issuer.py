"""The workload identity issuer: tokens relying parties can verify with the published JWKS,
the signing key kept on disk (private, reused), and the cache that re-mints before expiry."""

from __future__ import annotations

import base64
import hashlib
import json
import os
import stat
import time
from pathlib import Path

import jwt
import pytest

from sandgate.config import Config, IdentityConfig
from sandgate.errors import ConfigError
from sandgate.identity import JWKS_PATH, Issuer
from sandgate.identity.keys import CURRENT_KEY, PREVIOUS_KEY

ISSUER = "https://api.sandbox.example"


class Clock:
    def __init__(self) -> None:
        # Real time at the start: PyJWT checks iat and exp against its own clock.
        self.now = float(int(time.time()))

    def __call__(self) -> float:
        return self.now


def _issuer(home: Path, clock: Clock | None = None, ttl_s: int = 300) -> Issuer:
    return Issuer(ISSUER, "sandbox.example", home, ttl_s=ttl_s, clock=clock or Clock())


def _verify(token: str, issuer: Issuer, audience: str, leeway: int = 0) -> dict[str, object]:
    keys = jwt.PyJWKSet.from_dict(issuer.jwks())
    kid = jwt.get_unverified_header(token)["kid"]
    (key,) = [k for k in keys.keys if k.key_id == kid]
    claims: dict[str, object] = jwt.decode(
        token, key, algorithms=["ES256"], audience=audience, issuer=ISSUER, leeway=leeway
    )
    return claims


def test_a_token_verifies_against_the_jwks_with_its_audience_subject_and_lifetime(
    tmp_path: Path,
) -> None:
    issuer = _issuer(tmp_path, ttl_s=120)
    token = issuer.token("sbx1", "team-a", "aws", "sts.amazonaws.com")
    claims = _verify(token, issuer, "sts.amazonaws.com")
    assert claims["sub"] == "spiffe://sandbox.example/team/team-a/sandbox/sbx1"
    assert claims["aud"] == ["sts.amazonaws.com"]
    assert claims["iss"] == ISSUER
    assert claims["exp"] == claims["iat"] + 120 == claims["nbf"] + 120  # type: ignore[operator]
    assert isinstance(claims["jti"], str) and len(claims["jti"]) >= 16
    with pytest.raises(jwt.InvalidAudienceError):
        _verify(token, issuer, "someone-else")
    header = jwt.get_unverified_header(token)
    assert (header["alg"], header["kid"]) == ("ES256", issuer.kid)


def test_kid_is_the_rfc7638_thumbprint_and_discovery_points_at_the_jwks(tmp_path: Path) -> None:
    issuer = _issuer(tmp_path)
    (jwk,) = issuer.jwks()["keys"]
    required = {k: jwk[k] for k in ("crv", "kty", "x", "y")}
    digest = hashlib.sha256(json.dumps(required, sort_keys=True, separators=(",", ":")).encode())
    assert jwk["kid"] == base64.urlsafe_b64encode(digest.digest()).rstrip(b"=").decode()
    assert "d" not in jwk  # never the private part
    assert issuer.discovery() == {
        "issuer": ISSUER,
        "jwks_uri": ISSUER + JWKS_PATH,
        "response_types_supported": ["id_token"],
        "subject_types_supported": ["public"],
        "id_token_signing_alg_values_supported": ["ES256"],
    }


def test_the_key_is_created_private_and_reused(tmp_path: Path) -> None:
    home = tmp_path / "identity"
    first = _issuer(home)
    key_file = home / CURRENT_KEY
    assert stat.S_IMODE(key_file.stat().st_mode) == 0o600
    assert stat.S_IMODE(home.stat().st_mode) == 0o700
    assert [p.name for p in home.iterdir()] == [CURRENT_KEY]  # no temporary left behind
    token = first.token("sbx1", "t", "aws", "aud")
    again = _issuer(home)
    assert again.kid == first.kid
    assert _verify(token, again, "aud")["sub"] == "spiffe://sandbox.example/team/t/sandbox/sbx1"


def test_a_key_others_can_read_is_refused(tmp_path: Path) -> None:
    _issuer(tmp_path)
    os.chmod(tmp_path / CURRENT_KEY, 0o640)
    with pytest.raises(ConfigError, match="chmod 600"):
        _issuer(tmp_path)


def test_a_previous_key_is_published_but_never_signs(tmp_path: Path) -> None:
    old = _issuer(tmp_path)
    token = old.token("sbx1", "t", "aws", "aud")
    (tmp_path / CURRENT_KEY).rename(tmp_path / PREVIOUS_KEY)
    rotated = _issuer(tmp_path)
    assert rotated.kid != old.kid
    assert [k["kid"] for k in rotated.jwks()["keys"]] == [rotated.kid, old.kid]
    assert _verify(token, rotated, "aud")["aud"] == ["aud"]  # old tokens still verify
    fresh = rotated.token("sbx1", "t", "aws", "aud")
    assert jwt.get_unverified_header(fresh)["kid"] == rotated.kid


def test_tokens_are_cached_then_reminted_before_expiry(tmp_path: Path) -> None:
    clock = Clock()
    issuer = _issuer(tmp_path, clock, ttl_s=400)
    first = issuer.token("sbx1", "t", "aws", "aud")
    clock.now += 299  # 101 s left: more than a quarter (100 s)
    assert issuer.token("sbx1", "t", "aws", "aud") == first
    clock.now += 2  # 99 s left
    second = issuer.token("sbx1", "t", "aws", "aud")
    assert second != first
    # Minted on the test's clock, 301 s ahead of PyJWT's.
    assert _verify(second, _issuer(tmp_path), "aud", leeway=400)["iat"] == int(clock.now)
    # Both still valid, so both are masked in what flows back; other sandboxes' are not.
    other = issuer.token("sbx2", "t", "aws", "aud")
    assert sorted(issuer.live_tokens("sbx1")) == sorted([first, second])
    clock.now += 100  # the first expired
    assert issuer.live_tokens("sbx1") == [second]
    assert issuer.token("sbx1", "t", "gcp", "other") not in (first, second)
    issuer.forget("sbx1")
    assert issuer.live_tokens("sbx1") == [] and issuer.live_tokens("sbx2") == [other]


def test_sandbox_tokens_mint_only_registered_names(tmp_path: Path) -> None:
    issuer = _issuer(tmp_path)
    tokens = issuer.for_sandbox("sbx1", "t", {"aws": "sts.amazonaws.com"})
    assert tokens.names == ["aws"]
    token = tokens.token("aws")
    assert _verify(token, issuer, "sts.amazonaws.com")["aud"] == ["sts.amazonaws.com"]
    assert tokens.values() == [token.encode()]
    with pytest.raises(KeyError):
        tokens.token("gcp")


def test_defaults_follow_the_server_and_bad_settings_are_refused(tmp_path: Path) -> None:
    issuer = Issuer.from_config(
        Config.model_validate({"home": str(tmp_path), "server": {"domain": "Box.Example"}})
    )
    assert issuer.issuer == "http://api.Box.Example:7788"
    assert issuer.trust_domain == "box.example"
    tls = Config.model_validate(
        {
            "home": str(tmp_path),
            "server": {"domain": "box.example", "port": 443, "tls": {"mode": "local-ca"}},
            "identity": {"token_ttl_s": 600},
        }
    )
    assert (Issuer.from_config(tls).issuer, Issuer.from_config(tls).ttl_s) == (
        "https://api.box.example",
        600,
    )
    for bad in (
        {"issuer": "ftp://x"},
        {"issuer": "https://x/"},
        {"issuer": "https://x?q=1"},
        {"trust_domain": "Upper.Case"},
        {"token_ttl_s": 5},
    ):
        with pytest.raises(ValueError):
            IdentityConfig.model_validate(bad)
    with pytest.raises(ConfigError, match="trust_domain"):
        Issuer.from_config(
            Config.model_validate({"home": str(tmp_path), "server": {"domain": "a b"}})
        )
