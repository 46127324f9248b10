"""E2B's ``iam`` option on create: the named workload tokens a sandbox's ``network.rules``
may use as ``${e2b.identity.tokens.<name>}``.

Wire form (``SandboxIam``)::

    {"tokens": {"aws": {"audience": "sts.amazonaws.com", "tokenType": "JWT-SVID"}}}

Stored with the sandbox's ``network`` (key ``iam``, the same shape), so it outlives a gateway
restart and ``update_network``, whose payload carries no ``iam``, can keep using the names.
Names are checked as the SDKs check them (non-empty, no braces or control characters: a brace
would end or open a placeholder) and kept as given (case matters, as in E2B).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any, Final

from sandgate.errors import InvalidRequest

__all__ = [
    "IDENTITY_REFERENCE",
    "TOKEN_TYPE",
    "identity_names",
    "parse_iam",
    "registered_tokens",
]

#: A placeholder in a rule's header value: ``${e2b.identity.tokens.<name>}``.
IDENTITY_REFERENCE: Final = re.compile(r"\$\{e2b\.identity\.tokens\.([^}]*)\}")
#: The one token type there is (E2B's too): a JWT-SVID (SPIFFE's JWT profile).
TOKEN_TYPE: Final = "JWT-SVID"  # noqa: S105 - a type name, not a credential
_MAX_TOKENS: Final = 16
_MAX_NAME: Final = 128
_MAX_AUDIENCE: Final = 512
_BAD_NAME: Final = re.compile(r"[{}\x00-\x1f\x7f-\x9f]")
_BAD_AUDIENCE: Final = re.compile(r"[\x00-\x1f\x7f-\x9f]")


def parse_iam(raw: Any, *, where: str = "iam") -> dict[str, Any] | None:
    """``raw`` (the request's ``iam``) checked, in its stored form, or None when it
    registers no token (E2B: only a non-empty ``tokens`` map enables identity). Raises
    ``InvalidRequest`` naming the offending entry."""
    if raw is None:
        return None
    if not isinstance(raw, dict):
        raise InvalidRequest(f"{where} must be an object: {{'tokens': {{name: token}}}}")
    tokens = raw.get("tokens")
    if tokens is None:
        return None
    if not isinstance(tokens, dict):
        raise InvalidRequest(f"{where}.tokens must be an object mapping names to tokens")
    if len(tokens) > _MAX_TOKENS:
        raise InvalidRequest(f"{where}.tokens may register at most {_MAX_TOKENS} tokens")
    checked: dict[str, dict[str, str]] = {}
    for name, token in tokens.items():
        _check_name(name, f"{where}.tokens")
        checked[name] = _token(token, f"{where}.tokens['{name}']")
    return {"tokens": checked} if checked else None


def _check_name(name: Any, where: str) -> None:
    if not isinstance(name, str) or not name or len(name) > _MAX_NAME or _BAD_NAME.search(name):
        raise InvalidRequest(
            f"{where}: token name {str(name)[:80]!r} is not usable: give 1..{_MAX_NAME} "
            "characters without '{', '}' or control characters (it goes into the "
            "'${e2b.identity.tokens.<name>}' placeholder)"
        )


def _token(token: Any, where: str) -> dict[str, str]:
    if not isinstance(token, dict):
        raise InvalidRequest(f"{where} must be an object with 'audience' and 'tokenType'")
    token_type = token.get("tokenType")
    if token_type != TOKEN_TYPE:
        shown = str(token_type)[:80] if token_type is not None else "missing"
        raise InvalidRequest(
            f"{where}.tokenType {shown!r} is not supported: the only token type is '{TOKEN_TYPE}'"
        )
    audience = token.get("audience")
    if (
        not isinstance(audience, str)
        or not audience.strip()
        or len(audience) > _MAX_AUDIENCE
        or _BAD_AUDIENCE.search(audience)
    ):
        raise InvalidRequest(
            f"{where}.audience must be a non-empty string of at most {_MAX_AUDIENCE} "
            "characters without control characters (who the token is for, e.g. "
            "'sts.amazonaws.com')"
        )
    return {"audience": audience, "tokenType": TOKEN_TYPE}


def registered_tokens(network: Mapping[str, Any] | None) -> dict[str, str]:
    """The tokens a sandbox's stored ``network`` registers: name → audience."""
    iam = (network or {}).get("iam") or {}
    tokens = iam.get("tokens") or {}
    return {str(name): str(token["audience"]) for name, token in tokens.items()}


def identity_names(rules: Mapping[str, Sequence[Mapping[str, Any]]]) -> list[str]:
    """The token names ``rules`` (as ``transforms.parse_rules`` returns) refer to, in order."""
    names: list[str] = []
    for host_rules in rules.values():
        for rule in host_rules:
            headers = (rule.get("transform") or {}).get("headers") or {}
            for value in headers.values():
                for name in IDENTITY_REFERENCE.findall(value):
                    if name not in names:
                        names.append(name)
    return names
