"""Replacing secret values wherever they could leave the gateway.

A tool may echo a secret it was given (an error message quoting a token, an HTTP API that
reflects headers). Every result, error message and audit field passes through ``redact``
before it is returned to a sandbox or written anywhere. Longer values are replaced first so a
secret that contains another is hidden whole.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = ["Redactor"]


class Redactor:
    def __init__(self, secrets: Mapping[str, str]) -> None:
        self._pairs = sorted(
            ((value, f"[REDACTED:{name}]") for name, value in secrets.items() if value),
            key=lambda pair: -len(pair[0]),
        )

    def __bool__(self) -> bool:
        return bool(self._pairs)

    def text(self, value: str) -> str:
        for secret, marker in self._pairs:
            if secret in value:
                value = value.replace(secret, marker)
        return value

    def redact(self, value: Any) -> Any:
        """A copy of a JSON-like value with every secret in every string (keys too) replaced."""
        if not self._pairs:
            return value
        if isinstance(value, str):
            return self.text(value)
        if isinstance(value, bytes):
            return self.text(value.decode("utf-8", "replace"))
        if isinstance(value, Mapping):
            return {self.text(str(k)): self.redact(v) for k, v in value.items()}
        if isinstance(value, list | tuple):
            return [self.redact(v) for v in value]
        return value
