"""Honest answers for the parts of E2B's API this server does not serve: 501 naming the feature.

Every path in the official SDKs' generated clients (control plane, volume content, envd's REST
side) either has a route or is listed here; ``tests/compat/test_unserved.py`` walks the pinned
SDKs' clients and fails on any path that would get a bare 404 or 405. A listed path answers
``501 {"code": 501, "message": "<feature> …", "error_code": "not_implemented"}`` (the SDKs
report ``"501: <message>"``), never "not found", which SDKs read as "no such sandbox".

Only requests no route took reach this table (the fallback of each app's 404/405), so serving a
feature is just adding its routes; the table entry then stops mattering, and can go.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Final

from sandgate.errors import NotImplementedFeature

__all__ = ["CONTROL_UNSERVED", "ENVD_UNSERVED", "Unserved", "unserved_error"]


@dataclass(frozen=True)
class Unserved:
    """One E2B endpoint (``{name}`` marks a path parameter) and the feature it belongs to."""

    method: str
    path: str
    feature: str

    def matches(self, method: str, path: str) -> bool:
        return method == self.method and _pattern(self.path).fullmatch(path) is not None


def _pattern(template: str) -> re.Pattern[str]:
    return re.compile(re.sub(r"\\\{[^}]+\\\}", "[^/]+", re.escape(template)))


#: Control-plane endpoints (``api.<domain>``, and ``E2B_VOLUME_API_URL``'s volume content).
#: Every path of the pinned SDKs' control plane is served now (the v1 template builds last);
#: the table stays for the next one.
CONTROL_UNSERVED: Final[tuple[Unserved, ...]] = ()

#: envd's REST side (port 49983); its RPCs answer Connect ``unimplemented`` themselves. Every
#: REST path of the pinned SDKs' envd is served now; the table stays for the next one.
ENVD_UNSERVED: Final[tuple[Unserved, ...]] = ()


def unserved_error(
    table: tuple[Unserved, ...], method: str, path: str
) -> NotImplementedFeature | None:
    """The 501 for ``method path`` if ``table`` lists it, else None."""
    for entry in table:
        if entry.matches(method, path):
            return NotImplementedFeature(
                f"{entry.feature} is not implemented by this Sandgate server "
                f"(E2B API {entry.method} {entry.path}); docs/compatibility.md lists what is"
            )
    return None
