"""Workload identity (E2B's ``iam``): the issuer of the JWT-SVIDs the egress proxy puts in
the headers of ``network.rules`` (``sandgate.identity``)."""

from __future__ import annotations

import re
from typing import Final
from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict, Field, field_validator

__all__ = ["IdentityConfig", "check_issuer", "check_trust_domain"]

#: SPIFFE trust domain names: lower-case letters, digits, dots, dashes and underscores.
_TRUST_DOMAIN: Final = re.compile(r"^[a-z0-9._-]{1,255}$")


def check_issuer(value: str) -> str:
    """``value`` if it is a usable ``iss``: an http(s) URL with a host and no query, fragment
    or trailing slash (relying parties compare it byte for byte and append the well-known
    paths to it). Raises ``ValueError``."""
    parts = urlsplit(value)
    if parts.scheme not in ("https", "http") or not parts.hostname:
        raise ValueError(f"issuer {value!r} must be an https:// (or http://) URL with a host")
    if parts.query or parts.fragment or value.endswith("/") or parts.username:
        raise ValueError(f"issuer {value!r} must have no query, fragment, user or trailing slash")
    return value


def check_trust_domain(value: str) -> str:
    """``value`` if it is a SPIFFE trust domain name. Raises ``ValueError``."""
    if not _TRUST_DOMAIN.match(value):
        raise ValueError(
            f"trust_domain {value!r} must be lower-case letters, digits, '.', '-' or '_' "
            "(a SPIFFE trust domain name)"
        )
    return value


class IdentityConfig(BaseModel):
    """Where the tokens say they come from and how long they live. Empty ``issuer`` and
    ``trust_domain`` are derived from ``server`` (``sandgate.identity.Issuer.from_config``)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    #: The ``iss`` of every token and the base of its discovery document
    #: (``<issuer>/.well-known/openid-configuration``); set it to the URL relying parties
    #: reach this server at. Default: ``https://api.<domain>`` with TLS, else
    #: ``http://api.<domain>:<port>``.
    issuer: str = ""
    #: SPIFFE trust domain of the subjects (``spiffe://<it>/team/<team>/sandbox/<id>``).
    #: Default: ``server.domain``.
    trust_domain: str = ""
    #: Lifetime of a token; the proxy mints a new one when a cached one has less than a
    #: quarter of it left.
    token_ttl_s: int = Field(300, ge=60, le=3600)

    @field_validator("issuer")
    @classmethod
    def _issuer(cls, value: str) -> str:
        return check_issuer(value) if value else value

    @field_validator("trust_domain")
    @classmethod
    def _trust_domain(cls, value: str) -> str:
        return check_trust_domain(value) if value else value
