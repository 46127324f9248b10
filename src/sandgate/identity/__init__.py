"""Workload identity (E2B's ``iam``): short-lived JWT-SVIDs that the egress proxy puts in
the headers ``network.rules`` name, so a sandbox can prove who it is to a third party without
ever holding a credential (``issuer``); what a create call may register (``registration``);
the installation's signing key (``keys``)."""

from sandgate.identity.issuer import (
    ALGORITHM,
    JWKS_PATH,
    OPENID_CONFIGURATION_PATH,
    Issuer,
    SandboxTokens,
)
from sandgate.identity.registration import (
    IDENTITY_REFERENCE,
    TOKEN_TYPE,
    identity_names,
    parse_iam,
    registered_tokens,
)

__all__ = [
    "ALGORITHM",
    "IDENTITY_REFERENCE",
    "JWKS_PATH",
    "OPENID_CONFIGURATION_PATH",
    "TOKEN_TYPE",
    "Issuer",
    "SandboxTokens",
    "identity_names",
    "parse_iam",
    "registered_tokens",
]
