"""Secret placeholders: what a sandbox holds instead of a secret, and where it becomes one.

A sandbox gets, for each ``egress.secrets`` binding in its scope, an environment variable
whose value is an opaque placeholder. The placeholder is derived from a per-install key, the
sandbox id and the secret's name, so it is different in every sandbox (a leaked placeholder
is useless elsewhere, and a new sandbox never inherits an old one: MT-08), yet the gateway can
recompute it after a restart without storing anything.

Trust: the placeholder is not secret; the value is. ``SandboxSecrets`` swaps placeholder for
value only in the configured headers of a request whose destination (canonical host and port,
the one the proxy dialled and verified over TLS) a binding covers, and only for this sandbox's
own placeholders. It also scrubs the values out of anything flowing back (SEC-04).

A sandbox's team secrets reach the same place by another route: the header rules of its
``network.rules`` (``transforms``), applied after the placeholders, on the same verified
destinations, with their values scrubbed alike.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Final

from sandgate.config import SecretBinding
from sandgate.egress.names import Host, canonical_host
from sandgate.errors import ToolFailed
from sandgate.secrets import SecretStore
from sandgate.secrets.keyfile import install_key

if TYPE_CHECKING:
    from sandgate.egress.transforms import HeaderTransforms

__all__ = [
    "PLACEHOLDER_PREFIX",
    "BoundSecret",
    "SandboxSecrets",
    "Scrubber",
    "SecretUnavailable",
    "bind_secrets",
    "load_key",
]

PLACEHOLDER_PREFIX: Final = "sandgate-placeholder-"
_KEY_BYTES: Final = 32


class SecretUnavailable(Exception):
    """A bound secret cannot be read (or cannot go into a header); the message names it."""


def load_key(path: Path) -> bytes:
    """The install's placeholder key, created (0600, atomically) on first use."""
    return install_key(path, _KEY_BYTES)


def placeholder(key: bytes, sandbox_id: str, secret: str) -> str:
    digest = hmac.new(key, f"{sandbox_id}\0{secret}".encode(), hashlib.sha256).digest()
    return PLACEHOLDER_PREFIX + base64.b32encode(digest[:20]).decode().lower()


@dataclass(frozen=True)
class BoundSecret:
    secret: str
    env: str
    placeholder: bytes
    #: Canonical names, or ``*.suffix``.
    hosts: tuple[str, ...]
    ports: frozenset[int]
    #: Lower-case header names.
    headers: frozenset[bytes]

    def covers(self, host: Host, port: int) -> bool:
        if port not in self.ports or not isinstance(host, str):
            return False
        return any(
            host.endswith(pattern[1:]) if pattern.startswith("*.") else host == pattern
            for pattern in self.hosts
        )


def _canonical_pattern(text: str) -> str:
    if text.startswith("*."):
        return "*." + str(canonical_host(text[2:]))
    return str(canonical_host(text))


def bind_secrets(
    bindings: Sequence[SecretBinding],
    key: bytes,
    sandbox_id: str,
    *,
    template: str | None,
    agent: str | None,
) -> tuple[BoundSecret, ...]:
    """The bindings in scope for one sandbox, each with its placeholder."""
    bound = []
    for binding in bindings:
        if binding.templates and template not in binding.templates:
            continue
        if binding.agents and agent not in binding.agents:
            continue
        bound.append(
            BoundSecret(
                secret=binding.secret,
                env=binding.env_name,
                placeholder=placeholder(key, sandbox_id, binding.secret).encode(),
                hosts=tuple(_canonical_pattern(h) for h in binding.hosts),
                ports=frozenset(binding.ports),
                headers=frozenset(h.lower().encode() for h in binding.headers),
            )
        )
    return tuple(bound)


class SandboxSecrets:
    """One sandbox's bound secrets and header rules; values are read at each use."""

    def __init__(
        self,
        bound: Iterable[BoundSecret],
        store: SecretStore | None,
        transforms: HeaderTransforms | None = None,
    ) -> None:
        self._bound = tuple(bound)
        self._store = store
        self._transforms = transforms

    def __bool__(self) -> bool:
        return bool(self._bound) or bool(self._transforms)

    @property
    def env(self) -> dict[str, str]:
        """The placeholders, by variable name, for the sandbox's processes."""
        return {b.env: b.placeholder.decode() for b in self._bound}

    @property
    def names(self) -> list[str]:
        """Operator secrets bound by placeholder, then team secrets named by header rules,
        then the identity tokens those use (``${e2b.identity.tokens.<name>}``)."""
        team = self._transforms.secret_names if self._transforms is not None else []
        tokens = self._transforms.token_names if self._transforms is not None else []
        return sorted({b.secret for b in self._bound}) + team + tokens

    def intercepts(self, host: Host, port: int) -> bool:
        """True if requests to ``host:port`` may carry a secret, so TLS must be terminated."""
        if self._transforms is not None and self._transforms.intercepts(host, port):
            return True
        return any(b.covers(host, port) for b in self._bound)

    def substitute(
        self, headers: Sequence[tuple[bytes, bytes]], host: Host, port: int
    ) -> tuple[list[tuple[bytes, bytes]], list[str]]:
        """``headers`` with this destination's placeholders replaced in their own headers,
        and the names of the secrets used. Raises ``SecretUnavailable``."""
        applicable = [b for b in self._bound if b.covers(host, port)]
        used: list[str] = []
        out = []
        for name, value in headers:
            lowered = name.lower()
            for binding in applicable:
                if lowered in binding.headers and binding.placeholder in value:
                    value = value.replace(binding.placeholder, self._value(binding.secret))
                    if binding.secret not in used:
                        used.append(binding.secret)
            out.append((name, value))
        if self._transforms is not None:
            out, from_rules = self._transforms.apply(out, host, port)
            used += [name for name in from_rules if name not in used]
        return out, used

    def scrubber(self) -> Scrubber:
        """Masks every bound value in a stream of bytes flowing back into the sandbox."""
        values = []
        for name in sorted({b.secret for b in self._bound}):
            try:
                values.append(self._value(name))
            except SecretUnavailable:
                continue
        if self._transforms is not None:
            values += self._transforms.values()
        return Scrubber(values)

    def _value(self, name: str) -> bytes:
        if self._store is None:
            raise SecretUnavailable(f"secret '{name}': no operator secrets are configured")
        try:
            value = self._store.resolve([name])[name]
        except ToolFailed as exc:
            raise SecretUnavailable(exc.message) from None
        if any(c in value for c in "\r\n\0"):
            raise SecretUnavailable(f"secret '{name}' contains a line break; it cannot be a header")
        return value.encode()


class Scrubber:
    """Replaces secret values in a byte stream by ``*`` runs of the same length.

    Same length, so ``Content-Length`` stays right without buffering a whole body; a value
    split across chunks is caught because the last ``longest - 1`` bytes are held back until
    more data (or the end) arrives."""

    def __init__(self, values: Iterable[bytes]) -> None:
        self._values = sorted({v for v in values if v}, key=len, reverse=True)
        self._keep = max((len(v) for v in self._values), default=1) - 1
        self._tail = b""

    def scrub(self, data: bytes) -> bytes:
        return self._mask(data)

    def feed(self, data: bytes) -> bytes:
        """Scrubbed bytes that are safe to emit now (possibly fewer than given)."""
        if not self._values:
            return data
        buffer = self._mask(self._tail + data)
        cut = max(len(buffer) - self._keep, 0)
        self._tail = buffer[cut:]
        return buffer[:cut]

    def flush(self) -> bytes:
        tail, self._tail = self._tail, b""
        return tail

    def _mask(self, data: bytes) -> bytes:
        for value in self._values:
            if value in data:
                data = data.replace(value, b"*" * len(value))
        return data
