"""The subset of the Dockerfile language the shipped templates use, for building them without
a container engine (``_native``).

Supported: ``ARG``, ``FROM ${BASE_IMAGE}`` (the starting tree is the builder's business),
``ENV``, ``COPY`` (from the build context), ``RUN`` (shell form), ``WORKDIR``, ``LABEL`` and
``CMD`` (ignored: the guest daemon is every sandbox's command). Line continuations and
comment lines (also inside a continuation, as Docker reads them) are handled. Anything else is
refused with the line number, so a template never builds differently here than under Docker
without saying so.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass
from pathlib import Path

from .errors import TemplateBuildError

__all__ = ["Instruction", "expand", "key_values", "parse_dockerfile"]

_SUPPORTED = frozenset({"ARG", "FROM", "ENV", "COPY", "RUN", "WORKDIR", "LABEL", "CMD"})
_VARIABLE = re.compile(r"\$(?:\{([A-Za-z_][A-Za-z0-9_]*)\}|([A-Za-z_][A-Za-z0-9_]*))")


@dataclass(frozen=True)
class Instruction:
    line: int
    keyword: str
    text: str


def parse_dockerfile(path: Path) -> list[Instruction]:
    """Instructions of ``path`` in order; raises ``TemplateBuildError`` for anything outside
    the subset."""
    instructions: list[Instruction] = []
    pending: list[str] = []
    start = 0
    for number, raw in enumerate(path.read_text().splitlines(), start=1):
        stripped = raw.strip()
        if stripped.startswith("#") or (not stripped and not pending):
            continue
        if not pending:
            start = number
        if stripped.endswith("\\"):
            pending.append(stripped[:-1])
            continue
        pending.append(stripped)
        joined = " ".join(part.strip() for part in pending if part.strip())
        pending = []
        keyword, _, rest = joined.partition(" ")
        keyword = keyword.upper()
        if keyword not in _SUPPORTED:
            raise TemplateBuildError(
                f"{path}:{start}: {keyword} is not supported by the engine-less builder "
                f"(supported: {', '.join(sorted(_SUPPORTED))}); build this template with Docker"
            )
        if keyword == "COPY" and rest.lstrip().startswith("--"):
            raise TemplateBuildError(f"{path}:{start}: COPY options are not supported")
        instructions.append(Instruction(start, keyword, rest.strip()))
    if pending:
        raise TemplateBuildError(f"{path}: ends inside a line continuation")
    return instructions


def expand(text: str, variables: dict[str, str]) -> str:
    """``$NAME`` and ``${NAME}`` from ``variables`` (unknown ones become empty, as Docker's)."""
    return _VARIABLE.sub(lambda m: variables.get(m.group(1) or m.group(2), ""), text)


def key_values(text: str, where: str) -> dict[str, str]:
    """``k=v k2="v 2"`` (ENV, LABEL); raises ``TemplateBuildError`` for the legacy
    ``ENV k v`` form or a bad token."""
    try:
        tokens = shlex.split(text)
    except ValueError as exc:
        raise TemplateBuildError(f"{where}: {exc}") from None
    pairs = {}
    for token in tokens:
        key, sep, value = token.partition("=")
        if not sep or not key:
            raise TemplateBuildError(f"{where}: expected key=value, got {token!r}")
        pairs[key] = value
    return pairs
