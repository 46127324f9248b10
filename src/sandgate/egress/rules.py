"""Egress rules, compiled, and the per-sandbox policy they make up.

Where a sandbox's rules come from (``build_policy``), in the order they are consulted:

1. ``network.allowOut`` of its create call, each entry honoured only within the operator's
   ``egress.api_allow_out`` ceiling (and never with non-public ``addresses`` of its own);
2. ``network.denyOut`` of the call: a match refuses (E2B: allowOut wins over denyOut);
3. ``egress.allow``, ``egress.templates[<template>]``, ``egress.agents[<agent>]`` (operator
   grants, whatever the call says) and, only when the call asked for
   ``allow_internet_access``, ``egress.internet_access``. E2B SDKs send ``true`` by default,
   so ``internet_access`` is empty by default: the flag alone opens nothing.

Nothing else is reachable. Port 25 is refused whatever the rules say. A preset entry
(``pypi``) compiles to its hosts, all under the entry's id (``allow#0:pypi``).
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

from sandgate.config import EgressConfig, EgressRule, PresetRule
from sandgate.config._egress import RuleEntry, parse_rule_text
from sandgate.egress.addresses import Network
from sandgate.egress.names import Host, InvalidHost, canonical_host
from sandgate.errors import InvalidRequest

__all__ = ["BLOCKED_PORTS", "CompiledRule", "Decision", "EgressPolicy", "build_policy"]

BLOCKED_PORTS: Final = frozenset({25})
_ANY: Final = "*"


@dataclass(frozen=True)
class CompiledRule:
    """A rule in canonical form. ``pattern`` is a name, ``*.suffix``, ``*`` or an address."""

    id: str
    pattern: Host
    ports: frozenset[int]
    networks: tuple[Network, ...] = ()

    def covers_host(self, host: Host) -> bool:
        pattern = self.pattern
        if not isinstance(pattern, str) or not isinstance(host, str):
            return pattern == host
        if pattern == _ANY:
            return True
        if pattern.startswith("*."):
            return host.endswith(pattern[1:])
        return host == pattern

    def covers_rule(self, other: CompiledRule) -> bool:
        """True if every host and port ``other`` allows, this rule allows too."""
        if not other.ports <= self.ports:
            return False
        pattern, mine = other.pattern, self.pattern
        if isinstance(pattern, str) and pattern.startswith("*"):
            if mine == _ANY or pattern == _ANY:
                return mine == _ANY
            if not (isinstance(mine, str) and mine.startswith("*.")):
                return False
            return pattern == mine or pattern.endswith(mine[1:])
        return self.covers_host(pattern)


@dataclass(frozen=True)
class Decision:
    """The verdict on one host:port. ``reason`` is a stable code; ``rule`` the id that decided."""

    allowed: bool
    reason: str
    rule: str | None = None
    networks: tuple[Network, ...] = ()


def compile_rule(rule_id: str, rule: EgressRule, *, trusted: bool) -> CompiledRule:
    """Canonicalises ``rule``; ``trusted`` (operator config) lets an IP-literal host reach its
    own address even when it is not public. Raises ``InvalidHost``."""
    text = rule.host
    if text == _ANY:
        pattern: Host = _ANY
    elif text.startswith("*."):
        suffix = canonical_host(text[2:])
        if not isinstance(suffix, str):
            raise InvalidHost(f"'{text}': a wildcard needs a domain, not an address")
        pattern = "*." + suffix
    else:
        pattern = canonical_host(text)
    networks: list[Network] = list(rule.addresses) if trusted else []
    if trusted and not isinstance(pattern, str):
        networks.append(ipaddress.ip_network(pattern))
    return CompiledRule(rule_id, pattern, frozenset(rule.ports), tuple(networks))


@dataclass(frozen=True)
class EgressPolicy:
    """One sandbox's egress rules; immutable for the sandbox's life."""

    allow_first: tuple[CompiledRule, ...] = ()
    deny: tuple[CompiledRule, ...] = ()
    allow: tuple[CompiledRule, ...] = ()
    summary: Mapping[str, Any] = field(default_factory=dict)

    @property
    def reaches_internet(self) -> bool:
        """True when any public host name is reachable (a ``*`` rule on a usable port, e.g.
        the ``internet`` preset) and no denyOut entry takes every host away again. This is
        what E2B's ``allowInternetAccess`` reports."""

        def any_host(rules: Iterable[CompiledRule]) -> bool:
            return any(r.pattern == _ANY and r.ports - BLOCKED_PORTS for r in rules)

        if any_host(self.allow_first):
            return True
        return any_host(self.allow) and not any(r.pattern == _ANY for r in self.deny)

    def decide(self, host: Host, port: int) -> Decision:
        """Matches ``host`` (canonical) and ``port`` against the rules, first list first."""
        if port in BLOCKED_PORTS:
            return Decision(False, "port_blocked")
        host_matched = False
        for rule in self.allow_first:
            if rule.covers_host(host):
                if port in rule.ports:
                    return Decision(True, "allowed", rule.id, rule.networks)
                host_matched = True
        for rule in self.deny:
            if rule.covers_host(host):
                return Decision(False, "denied_by_request", rule.id)
        for rule in self.allow:
            if rule.covers_host(host):
                if port in rule.ports:
                    return Decision(True, "allowed", rule.id, rule.networks)
                host_matched = True
        if host_matched:
            return Decision(False, "port_not_allowed")
        return Decision(False, "host_not_allowed" if isinstance(host, str) else "ip_literal")


def _compile_all(
    prefix: str, entries: Iterable[RuleEntry], *, trusted: bool = True
) -> list[CompiledRule]:
    """Every entry compiled; a preset entry yields one rule per host, all with its id."""
    compiled = []
    for index, entry in enumerate(entries):
        if isinstance(entry, PresetRule):
            rule_id = f"{prefix}#{index}:{entry.preset}"
            compiled += [compile_rule(rule_id, r, trusted=trusted) for r in entry.rules]
        else:
            compiled.append(compile_rule(f"{prefix}#{index}", entry, trusted=trusted))
    return compiled


def _request_rule(prefix: str, index: int, text: Any) -> CompiledRule:
    if not isinstance(text, str):
        raise InvalidRequest(f"{prefix}[{index}] must be a string like 'api.example.com:443'")
    if text in ("0.0.0.0/0", "::/0"):
        text = _ANY
    try:
        fields = parse_rule_text(text)
        rule = EgressRule.model_validate(fields)
        return compile_rule(f"{prefix}#{index}", rule, trusted=False)
    except (ValueError, InvalidHost) as exc:
        raise InvalidRequest(f"{prefix}[{index}] '{text}' is not a host rule: {exc}") from None


def build_policy(
    config: EgressConfig,
    *,
    template: str | None,
    agent: str | None,
    internet_access: bool,
    network: Mapping[str, Any] | None,
    strict: bool = True,
) -> EgressPolicy:
    """The policy of one sandbox. ``network`` is the create call's ``{"allow_out": [...],
    "deny_out": [...]}``. With ``strict``, an allowOut entry outside ``api_allow_out`` raises
    ``InvalidRequest`` (the create fails with 400); otherwise it is dropped (adoption after a
    restart, when the ceiling may have shrunk). Raises ``InvalidRequest``."""
    network = network or {}
    ceiling = _compile_all("api_allow_out", config.api_allow_out)
    allow_first: list[CompiledRule] = []
    for index, text in enumerate(network.get("allow_out") or []):
        wanted = _request_rule("network.allowOut", index, text)
        explicit_ports = isinstance(text, str) and "ports" in parse_rule_text(text)
        granted = next(
            (c for c in ceiling if c.covers_rule(_asked(wanted, c, explicit_ports))),
            None,
        )
        if granted is None:
            if strict:
                raise InvalidRequest(
                    f"network.allowOut entry '{text}' is not permitted on this server; the "
                    "operator lists what API callers may open in egress.api_allow_out"
                )
            continue
        ports = wanted.ports if explicit_ports else granted.ports
        allow_first.append(CompiledRule(wanted.id, wanted.pattern, ports, granted.networks))
    deny = [
        _request_rule("network.denyOut", i, t) for i, t in enumerate(network.get("deny_out") or [])
    ]
    allow = _compile_all("allow", config.allow)
    if template is not None:
        allow += _compile_all(f"template:{template}", config.templates.get(template, []))
    if agent is not None:
        allow += _compile_all(f"agent:{agent}", config.agents.get(agent, []))
    if internet_access:
        allow += _compile_all("internet_access", config.internet_access)
    summary = {
        "allow_out": _ids(allow_first),
        "deny_out": _ids(deny),
        "allow": _ids(allow),
    }
    return EgressPolicy(tuple(allow_first), tuple(deny), tuple(allow), summary)


def _ids(rules: Iterable[CompiledRule]) -> list[str]:
    return list(dict.fromkeys(r.id for r in rules))


def _asked(wanted: CompiledRule, ceiling: CompiledRule, explicit_ports: bool) -> CompiledRule:
    """An entry without ports asks for whatever ports the ceiling rule grants."""
    return wanted if explicit_ports else CompiledRule(wanted.id, wanted.pattern, ceiling.ports)


def validate_rules(config: EgressConfig) -> None:
    """Compiles every configured rule once; raises ``InvalidHost`` naming the bad one."""
    groups: list[tuple[str, Sequence[RuleEntry]]] = [
        ("egress.allow", config.allow),
        ("egress.internet_access", config.internet_access),
        ("egress.api_allow_out", config.api_allow_out),
        *((f"egress.templates.{k}", v) for k, v in config.templates.items()),
        *((f"egress.agents.{k}", v) for k, v in config.agents.items()),
    ]
    for name, entries in groups:
        for index, entry in enumerate(entries):
            try:
                _compile_all(name, [entry])
            except InvalidHost as exc:
                raise InvalidHost(f"{name}.{index}: {exc}") from None
