"""Where secret values come from: the gateway's environment or files it can read.

Trust: the configuration (which names map to which source) is trusted; the values are the
assets. What this module guarantees is only where values are read from and that they are read
at call time (a rotated file takes effect on the next call). Keeping them out of sandboxes,
logs and audit records is the pipeline's job (``tools.pipeline``) with a ``Redactor``: values
are handed to executors and nowhere else.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from pathlib import Path

from sandgate.config import SecretSource
from sandgate.errors import ToolFailed

__all__ = ["SecretStore"]


class SecretStore:
    def __init__(
        self, sources: Mapping[str, SecretSource], environ: Mapping[str, str] | None = None
    ) -> None:
        self._sources = dict(sources)
        self._environ = os.environ if environ is None else environ

    @property
    def names(self) -> list[str]:
        return sorted(self._sources)

    def resolve(self, names: Iterable[str]) -> dict[str, str]:
        """The values of ``names``; raises ``ToolFailed`` naming a secret that is missing
        (never its value or where it was looked up beyond the variable or file name)."""
        return {name: self._value(name) for name in names}

    def all_values(self) -> dict[str, str]:
        """Every secret that currently resolves, for redaction; missing ones are skipped."""
        values = {}
        for name in self._sources:
            try:
                values[name] = self._value(name)
            except ToolFailed:
                continue
        return values

    def _value(self, name: str) -> str:
        source = self._sources.get(name)
        if source is None:
            raise ToolFailed(f"secret '{name}' is not declared in the secrets section")
        if source.env is not None:
            value = self._environ.get(source.env)
            if not value:
                raise ToolFailed(
                    f"secret '{name}' is unavailable: the gateway's environment has no {source.env}"
                )
            return value
        path = Path(source.file or "").expanduser()
        try:
            return path.read_text(encoding="utf-8").strip()
        except OSError:
            raise ToolFailed(f"secret '{name}' is unavailable: cannot read {path}") from None
