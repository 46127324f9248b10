"""E2B's ``network.rules``: headers the proxy sets on a sandbox's HTTPS requests to some hosts,
where team secrets (``${e2b.secrets.<name>}``) become their values and workload identity
tokens the create call registered (``${e2b.identity.tokens.<name>}``, ``sandgate.identity``)
become freshly minted JWT-SVIDs.

A rule set maps a host to rules, each ``{"transform": {"headers": {name: value}}}``::

    {"api.openai.com": [{"transform": {"headers": {"Authorization": "Bearer ${e2b.secrets.oai}"}}}]}

Semantics (E2B's): keys are exact names or ``*.domain`` (subdomains at any depth, not the apex;
a bare ``*`` is refused); an exact key wins, then the longest matching wildcard, and rule sets
are never merged; each rule's headers replace any same-name header the sandbox sent, in rule
order. Rules grant no network access (``allowOut`` does).

Trust: the rules come from API callers (trusted with their team's secrets); what they match on
comes from the sandbox (hostile). Enforced here and by the tunnel: a rule applies only to the
canonical host the proxy dialled and verified over TLS, on ``egress.transform_ports`` (443),
never to plain HTTP, so a secret is never sent in the clear or to another host; a placeholder
becomes a value only in the headers a rule names, never in the URL or body; values (and
identity tokens) are masked in everything flowing back (``Scrubber``). Keys must be names: an
address or CIDR cannot be verified by a certificate, so a rule for one is refused.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from sandgate.config._egress import HEADER_NAME, UNSUBSTITUTABLE_HEADERS
from sandgate.egress.names import Host, InvalidHost, canonical_host
from sandgate.egress.placeholders import SecretUnavailable
from sandgate.errors import InvalidRequest
from sandgate.identity import IDENTITY_REFERENCE, SandboxTokens, identity_names
from sandgate.secrets.team import SECRET_REFERENCE, canonical_secret_name

__all__ = [
    "HeaderTransforms",
    "SecretResolver",
    "identity_reference",
    "parse_rules",
    "secret_names",
]

_MAX_HOSTS: Final = 64
_MAX_RULES: Final = 16
_MAX_HEADERS: Final = 32
_MAX_VALUE: Final = 8 * 1024
_E2B_REFERENCE: Final = "${e2b."
_NOT_IN_HEADER: Final = re.compile(r"[\x00-\x08\x0a-\x1f\x7f]")
#: Either placeholder, so a value is rendered in one pass (a secret's value is never read
#: as a placeholder itself).
_REFERENCE: Final = re.compile(r"\$\{e2b\.(secrets|identity\.tokens)\.([^}]*)\}")

#: Resolves a secret name to its value; raises ``SecretUnavailable`` (``placeholders``).
SecretResolver = Callable[[str], str]


def parse_rules(raw: Any, *, where: str = "network.rules") -> dict[str, list[dict[str, Any]]]:
    """``raw`` (the request's ``rules`` object) checked and in canonical form: host keys as
    canonical names, secret references with canonical names. Raises ``InvalidRequest`` naming
    the offending entry."""
    if not isinstance(raw, dict):
        raise InvalidRequest(f"{where} must be an object mapping host names to lists of rules")
    if len(raw) > _MAX_HOSTS:
        raise InvalidRequest(f"{where} may name at most {_MAX_HOSTS} hosts")
    parsed: dict[str, list[dict[str, Any]]] = {}
    for key, rules in raw.items():
        host = _host_key(key, where)
        if host in parsed:
            raise InvalidRequest(f"{where}: '{key}' names the same host as another key")
        if not isinstance(rules, list) or len(rules) > _MAX_RULES:
            raise InvalidRequest(f"{where}['{key}'] must be a list of at most {_MAX_RULES} rules")
        parsed[host] = [_rule(rule, f"{where}['{key}'][{i}]") for i, rule in enumerate(rules)]
    return parsed


def secret_names(rules: Mapping[str, Sequence[Mapping[str, Any]]]) -> set[str]:
    """The canonical names of the secrets ``rules`` (as ``parse_rules`` returns) refer to."""
    names: set[str] = set()
    for host_rules in rules.values():
        for rule in host_rules:
            for value in _headers(rule).values():
                names.update(m.lower() for m in SECRET_REFERENCE.findall(value))
    return names


def _host_key(key: Any, where: str) -> str:
    text = key if isinstance(key, str) else ""
    wildcard = text.startswith("*.")
    try:
        host = canonical_host(text[2:] if wildcard else text)
    except InvalidHost as exc:
        raise InvalidRequest(f"{where}: '{text[:100]}' is not a host name: {exc}") from None
    if not isinstance(host, str):
        raise InvalidRequest(
            f"{where}: '{text[:100]}' must be a host name or '*.domain': a header is only ever "
            "set on requests to a named host, over TLS the proxy verifies"
        )
    return f"*.{host}" if wildcard else host


def _rule(rule: Any, where: str) -> dict[str, Any]:
    if not isinstance(rule, dict) or set(rule) - {"transform"}:
        raise InvalidRequest(f"{where} must be an object with only 'transform'")
    transform = rule.get("transform")
    if transform is None:
        return {}
    if not isinstance(transform, dict) or set(transform) - {"headers"}:
        raise InvalidRequest(f"{where}.transform supports only 'headers' on this server")
    headers = transform.get("headers") or {}
    if not isinstance(headers, dict) or len(headers) > _MAX_HEADERS:
        raise InvalidRequest(f"{where}.transform.headers must map at most {_MAX_HEADERS} names")
    checked: dict[str, str] = {}
    for name, value in headers.items():
        _check_header(name, value, f"{where}.transform.headers")
        if name.lower() in {n.lower() for n in checked}:
            raise InvalidRequest(f"{where}.transform.headers names '{name}' twice")
        checked[name] = SECRET_REFERENCE.sub(_canonical_reference(where), value)
    return {"transform": {"headers": checked}}


def _canonical_reference(where: str) -> Callable[[Any], str]:
    def replace(match: Any) -> str:
        try:
            name = canonical_secret_name(match.group(1))
        except InvalidRequest as exc:
            raise InvalidRequest(f"{where}: {exc.message}") from None
        return "${e2b.secrets." + name + "}"

    return replace


def _check_header(name: Any, value: Any, where: str) -> None:
    if not isinstance(name, str) or not HEADER_NAME.match(name):
        raise InvalidRequest(f"{where}: {str(name)[:80]!r} is not an HTTP header name")
    if name.lower() in UNSUBSTITUTABLE_HEADERS or name.lower().startswith("proxy-"):
        raise InvalidRequest(
            f"{where}: '{name}' cannot be set by a rule (framing, routing and proxy headers "
            "stay the proxy's); name headers like Authorization or X-Api-Key"
        )
    if not isinstance(value, str) or len(value) > _MAX_VALUE:
        raise InvalidRequest(f"{where}['{name}'] must be a string of at most {_MAX_VALUE} bytes")
    if _NOT_IN_HEADER.search(value):
        raise InvalidRequest(f"{where}['{name}'] cannot contain line breaks or control characters")
    if any(not token for token in IDENTITY_REFERENCE.findall(value)):
        raise InvalidRequest(
            f"{where}['{name}'] has an identity placeholder without a token name; write "
            "${e2b.identity.tokens.<name>} with a name the create call's iam registers"
        )
    rest = IDENTITY_REFERENCE.sub("", SECRET_REFERENCE.sub("", value))
    if _E2B_REFERENCE in rest:
        raise InvalidRequest(
            f"{where}['{name}'] has a '${{e2b.' placeholder this server does not know; "
            "write secrets as ${e2b.secrets.<name>} and identity tokens as "
            "${e2b.identity.tokens.<name>}"
        )


def _headers(rule: Mapping[str, Any]) -> dict[str, str]:
    transform = rule.get("transform") or {}
    headers = transform.get("headers") or {}
    return dict(headers)


def identity_reference(name: str) -> str:
    """How an identity token is named where secrets are named by name (audit records): its
    placeholder, which no secret name can be (names hold no braces)."""
    return "${e2b.identity.tokens." + name + "}"


@dataclass(frozen=True)
class _HostRules:
    """The headers one host's rules set, in order (later rules override earlier ones)."""

    headers: tuple[tuple[bytes, str], ...]


class HeaderTransforms:
    """One sandbox's compiled ``network.rules``; secret values are resolved at each use, so a
    rotated secret takes effect on the next request and a deleted one stops working; identity
    tokens come from ``identity`` (the sandbox's registered tokens), minted as they expire."""

    def __init__(
        self,
        rules: Mapping[str, Sequence[Mapping[str, Any]]],
        resolve: SecretResolver,
        ports: Iterable[int],
        identity: SandboxTokens | None = None,
    ) -> None:
        self._exact: dict[str, _HostRules] = {}
        self._wildcards: list[tuple[str, _HostRules]] = []
        self._resolve = resolve
        self._identity = identity
        self._ports = frozenset(ports)
        self._names = sorted(secret_names(rules))
        self._tokens = [identity_reference(name) for name in identity_names(rules)]
        for key, host_rules in rules.items():
            merged: dict[bytes, tuple[bytes, str]] = {}
            for rule in host_rules:
                for name, value in _headers(rule).items():
                    merged[name.lower().encode()] = (name.encode(), value)
            compiled = _HostRules(tuple(merged.values()))
            if key.startswith("*."):
                self._wildcards.append((key[1:], compiled))
            else:
                self._exact[key] = compiled
        # The longest suffix first: the most specific wildcard wins.
        self._wildcards.sort(key=lambda pair: len(pair[0]), reverse=True)

    def __bool__(self) -> bool:
        return bool(self._exact or self._wildcards)

    @property
    def secret_names(self) -> list[str]:
        return self._names

    @property
    def token_names(self) -> list[str]:
        """The identity tokens the rules use, named as ``identity_reference`` names them."""
        return self._tokens

    def _match(self, host: Host) -> _HostRules | None:
        if not isinstance(host, str):
            return None
        found = self._exact.get(host)
        if found is not None:
            return found
        for suffix, rules in self._wildcards:
            if host.endswith(suffix):
                return rules
        return None

    def intercepts(self, host: Host, port: int) -> bool:
        """True if requests to ``host:port`` get headers from a rule (TLS is terminated)."""
        rules = self._match(host)
        return port in self._ports and rules is not None and bool(rules.headers)

    def apply(
        self, headers: Sequence[tuple[bytes, bytes]], host: Host, port: int
    ) -> tuple[list[tuple[bytes, bytes]], list[str]]:
        """``headers`` with the matching rules' headers set (same-name ones replaced) and the
        names of the secrets used (identity tokens as ``identity_reference``). Raises
        ``SecretUnavailable``."""
        rules = self._match(host) if port in self._ports else None
        if rules is None or not rules.headers:
            return list(headers), []
        replaced = {name.lower() for name, _ in rules.headers}
        out = [(n, v) for n, v in headers if n.lower() not in replaced]
        used: list[str] = []
        for name, template in rules.headers:
            out.append((name, self._render(template, used)))
        return out, used

    def values(self) -> list[bytes]:
        """Every secret value the rules refer to that resolves now, and every unexpired
        identity token minted for the sandbox (for scrubbing)."""
        found = []
        for name in self._names:
            try:
                found.append(self._resolve(name).encode())
            except SecretUnavailable:
                continue
        if self._identity is not None:
            found += self._identity.values()
        return found

    def _render(self, template: str, used: list[str]) -> bytes:
        def value(match: Any) -> str:
            kind, name = str(match.group(1)), str(match.group(2))
            if kind == "secrets":
                if name not in used:
                    used.append(name)
                return self._resolve(name)
            if identity_reference(name) not in used:
                used.append(identity_reference(name))
            return self._token(name)

        return _REFERENCE.sub(value, template).encode()

    def _token(self, name: str) -> str:
        # SECURITY: only names the create call registered mint a token (the create and
        # update checks refuse others; this refuses them again at use).
        try:
            if self._identity is None:
                raise KeyError(name)
            return self._identity.token(name)
        except KeyError:
            raise SecretUnavailable(
                f"identity token '{name}' is not registered for this sandbox"
            ) from None
