"""Configuration of sandbox egress (``egress:``): who may reach which hosts, through the proxy.

Default: nothing. A sandbox reaches a host only when a rule here (or an API request this
section permits) names it. Rules are written ``host``, ``host:port`` or ``host:port,port``, or
as an object when they need more::

    egress:
      allow: [pypi, "api.example.com:443"]                # every sandbox (a preset, a host)
      templates: {node: [npm]}                            # sandboxes of one template
      agents: {researcher: ["*.wikipedia.org:443"]}       # sandboxes of one declared agent
      internet_access: []                                 # what E2B allow_internet_access grants
      api_allow_out: ["*.github.com:443"]                 # what network.allowOut may ask for
      resolve_overrides: {fixture.test: ["127.0.0.1"]}    # name → addresses (tests, split DNS)
      - host: internal-api.corp.test                      # (object form)
        ports: [8443]
        addresses: ["10.20.0.0/16"]                       # non-public addresses it may reach

``host`` is an exact name, ``*.domain`` (subdomains of domain, not domain itself), ``*`` (any
name; public addresses only) or an IP literal (that address only). ``ports`` default to 443
and 80; port 25 is always refused.

A bare word in any of these lists names a preset (``_presets``): ``allow: [pypi, npm]``,
``internet_access: [internet]``. A bare word is never a host, so an unknown one is an error
that lists the known presets; a single-label host is written ``{host: minio}`` or
``minio:9000``. A non-public address (private, loopback, link-local, CGNAT,
multicast, reserved) is reached only through a rule whose ``addresses`` contains it; metadata
endpoints are refused whatever a rule says.

Secrets the sandboxed code may *use* but never read (``secrets:``)::

    secrets: {GITHUB_TOKEN: {env: GITHUB_TOKEN}}          # the value, on the gateway only
    egress:
      allow: ["api.github.com:443"]
      secrets:
        - secret: GITHUB_TOKEN         # inside: $GITHUB_TOKEN holds an opaque placeholder
          hosts: ["api.github.com"]    # the only destinations where it becomes the value
          headers: ["Authorization"]   # the only headers where it is substituted (default)
          templates: []                # scope: these templates / agents (empty: every sandbox)
          agents: []

The proxy terminates TLS for bound hosts (with a per-install CA the sandbox is told to trust)
and swaps the placeholder for the value only in the listed headers of requests to a bound host
on a listed port (443 by default); anywhere else the placeholder stays inert.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Iterable
from pathlib import Path
from typing import Annotated, Any

from pydantic import (
    BaseModel,
    ConfigDict,
    Discriminator,
    Field,
    IPvAnyAddress,
    IPvAnyNetwork,
    Tag,
    field_validator,
    model_validator,
)

from sandgate.config._presets import PRESETS

__all__ = [
    "DEFAULT_PORTS",
    "HEADER_NAME",
    "UNSUBSTITUTABLE_HEADERS",
    "EgressConfig",
    "EgressRule",
    "PresetRule",
    "RuleEntry",
    "SecretBinding",
    "parse_rule_text",
]

DEFAULT_PORTS: tuple[int, ...] = (443, 80)
_HOST = re.compile(r"^(\*|(\*\.)?[A-Za-z0-9_]([A-Za-z0-9_.-]*[A-Za-z0-9_])?\.?)$")
_BOUND_HOST = re.compile(r"^(\*\.)?[A-Za-z0-9_]([A-Za-z0-9_.-]*[A-Za-z0-9_])?\.?$")
#: A bare word: no dot, no port, no wildcard. Always a preset name, never a host.
_PRESET_WORD = re.compile(r"^[A-Za-z][A-Za-z0-9_-]*$")
HEADER_NAME = re.compile(r"^[!#$%&'*+\-.^_`|~0-9A-Za-z]+$")
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,127}$")
#: Headers a placeholder may never be substituted into: framing, routing and proxy control.
UNSUBSTITUTABLE_HEADERS = frozenset(
    {
        "host",
        "content-length",
        "transfer-encoding",
        "connection",
        "upgrade",
        "te",
        "trailer",
        "cookie",
        "proxy-authorization",
    }
)


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


def parse_rule_text(text: str) -> dict[str, Any]:
    """``host``, ``host:port,port`` or ``[v6]:port`` → the object form's fields.

    Raises ``ValueError`` naming what is wrong."""
    text = text.strip()
    ports: list[int] | None = None
    if text.startswith("["):
        host, sep, rest = text[1:].partition("]")
        if not sep or (rest and not rest.startswith(":")):
            raise ValueError(f"'{text}': an IPv6 rule is written [address] or [address]:port")
        port_text = rest[1:] if rest else ""
    elif text.count(":") > 1:
        host, port_text = text, ""  # a bare IPv6 address
    else:
        host, _, port_text = text.partition(":")
    if port_text:
        try:
            ports = [int(p) for p in port_text.split(",")]
        except ValueError:
            raise ValueError(f"'{text}': ports must be integers, e.g. host:443,80") from None
    fields: dict[str, Any] = {"host": host}
    if ports is not None:
        fields["ports"] = ports
    return fields


class EgressRule(_Section):
    """One allowed destination: a host pattern, its ports and any non-public addresses."""

    host: str
    ports: list[int] = Field(default_factory=lambda: list(DEFAULT_PORTS), min_length=1)
    #: Non-public networks this rule may connect to (e.g. a test fixture on 127.0.0.1).
    #: Metadata endpoints stay refused even when listed.
    addresses: list[IPvAnyNetwork] = Field(default_factory=list)

    @model_validator(mode="before")
    @classmethod
    def _from_text(cls, value: Any) -> Any:
        return parse_rule_text(value) if isinstance(value, str) else value

    @model_validator(mode="after")
    def _check(self) -> EgressRule:
        if not _is_ip(self.host) and not _HOST.match(self.host):
            raise ValueError(
                f"host '{self.host}' must be a name, '*.domain', '*' or an IP address "
                "(no 'example.*', no URL, no userinfo)"
            )
        _check_ports(self.ports)
        return self


class PresetRule(_Section):
    """A named preset (``pypi``) standing for the rules ``_presets.PRESETS`` lists for it."""

    preset: str

    @model_validator(mode="before")
    @classmethod
    def _from_text(cls, value: Any) -> Any:
        return {"preset": value.strip()} if isinstance(value, str) else value

    @field_validator("preset")
    @classmethod
    def _known(cls, name: str) -> str:
        key = name.lower()
        if key not in PRESETS:
            raise ValueError(
                f"unknown egress preset '{name}'; known presets: {', '.join(PRESETS)} "
                f"(a single-label host is written {{host: {name}}} or {name}:<port>)"
            )
        return key

    @property
    def rules(self) -> list[EgressRule]:
        return [EgressRule(host=host, ports=list(ports)) for host, ports in PRESETS[self.preset]]


def _entry_kind(value: Any) -> str:
    if isinstance(value, PresetRule) or (isinstance(value, dict) and "preset" in value):
        return "preset"
    if isinstance(value, str) and _PRESET_WORD.match(value.strip()):
        return "preset"
    return "host"


#: One entry of a rule list: a host rule (text or object) or a preset name.
RuleEntry = Annotated[
    Annotated[EgressRule, Tag("host")] | Annotated[PresetRule, Tag("preset")],
    Discriminator(_entry_kind),
]


def _check_ports(ports: list[int]) -> None:
    for port in ports:
        if not 0 < port < 65536:
            raise ValueError(f"port {port} is not in 1..65535")


def _is_ip(text: str) -> bool:
    try:
        ipaddress.ip_address(text)
    except ValueError:
        return False
    return True


class SecretBinding(_Section):
    """A secret (``secrets:``) a sandbox may use in requests to some hosts, never read."""

    secret: str
    #: The variable inside the sandbox that holds the placeholder (default: the secret's name).
    env: str | None = None
    #: Exact names or ``*.domain``; no IP literals, no ``*`` (a secret has a home).
    hosts: list[str] = Field(min_length=1)
    ports: list[int] = Field(default_factory=lambda: [443], min_length=1)
    #: Request headers where the placeholder is replaced by the value (case-insensitive).
    headers: list[str] = Field(default_factory=lambda: ["Authorization"], min_length=1)
    #: Only sandboxes of these templates / acting as these agents (empty lists: every sandbox).
    templates: list[str] = Field(default_factory=list)
    agents: list[str] = Field(default_factory=list)

    @property
    def env_name(self) -> str:
        return self.env or self.secret

    @model_validator(mode="after")
    def _check(self) -> SecretBinding:
        if not _ENV_NAME.match(self.env_name):
            raise ValueError(
                f"'{self.env_name}' is not a usable environment variable name; set env: to one"
            )
        for host in self.hosts:
            if _is_ip(host) or not _BOUND_HOST.match(host):
                raise ValueError(
                    f"secret '{self.secret}': host '{host}' must be a name or '*.domain' "
                    "(a secret is only ever sent to named hosts over verified TLS)"
                )
        _check_ports(self.ports)
        for header in self.headers:
            if not HEADER_NAME.match(header) or header.lower() in UNSUBSTITUTABLE_HEADERS:
                raise ValueError(
                    f"secret '{self.secret}': '{header}' cannot carry a secret; name request "
                    "headers like Authorization or X-Api-Key"
                )
        return self


class EgressConfig(_Section):
    """Allow-lists (all empty by default: no egress) and the proxy's per-sandbox limits."""

    #: Rules every sandbox gets.
    allow: list[RuleEntry] = Field(default_factory=list)
    #: Rules per template name.
    templates: dict[str, list[RuleEntry]] = Field(default_factory=dict)
    #: Rules per declared agent id (``agents:``), for sandboxes that act as that agent.
    agents: dict[str, list[RuleEntry]] = Field(default_factory=dict)
    #: What ``allow_internet_access: true`` grants. E2B SDKs send ``true`` by default, so it
    #: must mean nothing unless the operator says so here (e.g. ``[internet]``).
    internet_access: list[RuleEntry] = Field(default_factory=list)
    #: The ceiling for ``network.allowOut`` in create calls: an entry is honoured only if one
    #: of these rules covers its host (and ports); anything else is refused with 400.
    api_allow_out: list[RuleEntry] = Field(default_factory=list)
    #: Fixed answers used instead of DNS for these names (tests, split-horizon setups). An
    #: override does not make an address reachable: non-public answers still need a rule
    #: whose ``addresses`` contains them.
    resolve_overrides: dict[str, list[IPvAnyAddress]] = Field(default_factory=dict)
    #: Open tunnels per sandbox; more are refused with 429.
    max_tunnels_per_sandbox: int = Field(32, ge=1, le=10_000)
    connect_timeout_s: float = Field(10.0, gt=0, le=300)
    #: A tunnel with no bytes either way for this long is closed.
    idle_timeout_s: float = Field(300.0, gt=0)
    #: A tunnel is closed after this long, busy or not.
    max_tunnel_s: float = Field(3600.0, gt=0)
    #: Secret placeholders, substituted by the proxy for bound hosts only.
    secrets: list[SecretBinding] = Field(default_factory=list)
    #: Extra CA certificates (PEM) trusted when the proxy itself connects over TLS to a bound
    #: host, on top of the system's (a corporate CA; a test fixture's CA).
    upstream_ca_file: Path | None = None
    #: Ports on which the header rules of E2B's ``network.rules`` apply (HTTPS only: the
    #: proxy terminates TLS there for a rule's host). E2B's are HTTPS on 443.
    transform_ports: list[int] = Field(default_factory=lambda: [443], min_length=1)

    def with_presets(self, names: Iterable[str]) -> EgressConfig:
        """A copy whose ``allow`` (every sandbox) also lists these presets."""
        present = {entry.preset for entry in self.allow if isinstance(entry, PresetRule)}
        added = [PresetRule(preset=name) for name in names if name not in present]
        return self.model_copy(update={"allow": [*self.allow, *added]})

    @model_validator(mode="after")
    def _unique_variables(self) -> EgressConfig:
        _check_ports(self.transform_ports)
        seen: set[str] = set()
        for binding in self.secrets:
            if binding.env_name in seen:
                raise ValueError(
                    f"egress.secrets: two bindings put a placeholder in ${binding.env_name}; "
                    "give one of them another env:"
                )
            seen.add(binding.env_name)
        return self
