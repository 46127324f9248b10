"""Argument conditions, compiled: what ``args: {name: {...}}`` in a rule means.

Every check a condition gives must hold for the argument's value:

* ``equals``: the value equals this JSON value (``equals: null`` asks for null);
* ``one_of``: the value equals one of these;
* ``glob``, ``matches``, ``full_match``: the value is a string and the pattern holds
  (``policy.patterns``: linear time, the whole value, at most ``MAX_INPUT_BYTES``);
* ``min``, ``max``: the value is a number (not a boolean) within these bounds, inclusive.

A missing argument matches no condition. The value is the *validated* argument, the same
object the executor receives (GW-07), so a schema's coercions and defaults come first.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sandgate.config import ArgCondition
from sandgate.policy.patterns import Pattern, compile_pattern, require_finite

__all__ = ["ArgCheck"]


@dataclass(frozen=True)
class ArgCheck:
    """One argument's condition with its patterns compiled once."""

    name: str
    condition: ArgCondition
    patterns: tuple[Pattern, ...]

    @classmethod
    def compile(cls, name: str, condition: ArgCondition) -> ArgCheck:
        """Raises ``PatternError`` for a pattern RE2 rejects (config validation says so first)."""
        compiled = tuple(compile_pattern(op, source) for op, source in condition.patterns())
        return cls(name, condition, compiled)

    def holds(self, value: Any) -> bool:
        """Whether ``value`` passes every check; raises ``Undecidable`` for a value too long
        for a pattern, or a NaN under a numeric bound."""
        c = self.condition
        what = f"argument '{self.name}'"
        if c.has_equals and value != c.equals:
            return False
        if c.one_of is not None and value not in c.one_of:
            return False
        if self.patterns:
            if not isinstance(value, str):
                return False
            for pattern in self.patterns:
                if not pattern.test(value, what):
                    return False
        if c.min is not None or c.max is not None:
            if isinstance(value, bool) or not isinstance(value, int | float):
                return False
            require_finite(value, what)
            if c.min is not None and value < c.min:
                return False
            if c.max is not None and value > c.max:
                return False
        return True
