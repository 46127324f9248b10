"""Linear-time patterns for policy conditions: RE2 regular expressions and globs.

Trust: a pattern comes from the operator's reviewed config; the text it is matched against
(argument values, the action, sandbox metadata) is chosen by code in a sandbox. So matching
must cost time linear in that text whatever the pattern is: every operator here runs on RE2,
an automaton-based engine without backtracking, backreferences or lookaround. Python's ``re``
and ``fnmatch`` (which is ``re`` underneath) are never used on that text.

Operators:

* ``matches``: RE2 search; true when the pattern occurs anywhere in the text.
* ``full_match``: RE2 full match; true when the pattern covers the whole text.
* ``glob``: shell-style, over the whole text: ``*`` any run of characters (newlines and ``/``
  included), ``?`` one character, ``[abc]``, ``[a-z]``, ``[!abc]`` one of / not one of. There
  is no escape character: ``\\`` is literal, and ``[`` without a closing ``]`` is literal. The
  same meaning as Python's ``fnmatch.fnmatchcase``, which the tests check, compiled to RE2.

Bounds: a pattern is at most ``MAX_PATTERN_CHARS`` characters and its compiled program at most
RE2's default of 8 MiB (both config errors, naming the pattern). The text is matched whole —
never a prefix, which would let a long value slip past a deny — up to ``MAX_INPUT_BYTES`` of
UTF-8; a longer text raises ``Undecidable``, and the engine denies the call.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal

import re2

__all__ = [
    "MAX_INPUT_BYTES",
    "MAX_PATTERN_CHARS",
    "Operator",
    "Pattern",
    "PatternError",
    "Undecidable",
    "compile_pattern",
    "glob_covers",
    "glob_is_literal",
    "require_finite",
]

#: The longest pattern source accepted, in characters.
MAX_PATTERN_CHARS = 1024
#: The longest text (UTF-8 bytes) a pattern is matched against; longer text is undecidable.
MAX_INPUT_BYTES = 1024 * 1024

Operator = Literal["glob", "matches", "full_match"]


class PatternError(ValueError):
    """A pattern that cannot be used (syntax RE2 rejects, too long); the message says why."""


class Undecidable(Exception):
    """A condition cannot be evaluated on this input (too long, not a finite number).

    The engine turns it into a deny: a value the policy cannot judge is never let through.
    """

    def __init__(self, what: str) -> None:
        super().__init__(what)
        self.what = what


def _options() -> Any:
    options = re2.Options()
    options.log_errors = False  # the error comes back to us as re2.error; no stderr noise
    options.never_capture = True  # only whether it matches counts; no submatch bookkeeping
    return options


_OPTIONS = _options()


@dataclass(frozen=True)
class Pattern:
    """A compiled pattern; ``test`` decides a text in time linear in its length."""

    operator: Operator
    source: str
    _regex: Any = field(repr=False, compare=False)
    #: For the common globs (``name``, ``*``, ``prefix*``, ``*suffix``) a plain string test
    #: with the same meaning, which skips RE2's call overhead.
    _simple: Callable[[str], bool] | None = field(default=None, repr=False, compare=False)

    def test(self, text: str, what: str = "the value") -> bool:
        """Whether ``text`` matches; raises ``Undecidable`` when it exceeds the input bound."""
        if self._simple is not None:
            if len(text) * 4 > MAX_INPUT_BYTES:  # UTF-8 takes at most 4 bytes a character
                _utf8(text, what)
            return self._simple(text)
        data = _utf8(text, what)
        if self.operator == "matches":
            return self._regex.search(data) is not None
        return self._regex.fullmatch(data) is not None


def compile_pattern(operator: Operator, source: str) -> Pattern:
    """Compiles ``source`` for ``operator``; raises ``PatternError`` saying what is wrong."""
    if len(source) > MAX_PATTERN_CHARS:
        raise PatternError(
            f"pattern is {len(source)} characters; at most {MAX_PATTERN_CHARS} are allowed"
        )
    if any(0xD800 <= ord(c) <= 0xDFFF for c in source):
        raise PatternError(f"pattern {_show(source)} contains a lone surrogate, which is not text")
    regex = _glob_to_re2(source) if operator == "glob" else source
    try:
        compiled = re2.compile(regex.encode("utf-8"), _OPTIONS)
    except re2.error as exc:
        reason = exc.args[0] if exc.args else "rejected"
        detail = reason.decode("utf-8", "replace") if isinstance(reason, bytes) else str(reason)
        hint = (
            " (RE2 has no backreferences or lookaround; see https://github.com/google/re2/wiki/Syntax)"
            if operator != "glob"
            else ""
        )
        raise PatternError(
            f"pattern {_show(source)} is not valid RE2 syntax: {detail}{hint}"
        ) from None
    return Pattern(operator, source, compiled, _simple_glob(source) if operator == "glob" else None)


def _simple_glob(glob: str) -> Callable[[str], bool] | None:
    stars = glob.count("*")
    body = glob.strip("*")
    if any(c in body for c in "*?[\ufffd"):  # U+FFFD also stands for lone surrogates
        return None
    if stars == 0:
        return glob.__eq__
    if stars == len(glob):
        return lambda text: True
    if glob == body + "*" * stars:
        return lambda text: text.startswith(body)
    if glob == "*" * stars + body:
        return lambda text: text.endswith(body)
    return None


def require_finite(value: float, what: str) -> None:
    """Raises ``Undecidable`` for NaN, which no numeric bound can order."""
    if isinstance(value, float) and math.isnan(value):
        raise Undecidable(f"{what} is NaN, which no numeric bound can judge")


def glob_is_literal(source: str) -> bool:
    """Whether a glob has no special characters, so it matches exactly itself."""
    return not any(c in "*?[" for c in source)


def glob_covers(outer: str, inner: str) -> bool:
    """Whether every text matching glob ``inner`` also matches glob ``outer``.

    Conservative (used by ``policy lint``): true only when it is certain, for equal globs, an
    ``outer`` made only of ``*``, a literal ``inner`` that ``outer`` matches, or an ``outer``
    that is a literal prefix plus ``*`` that ``inner``'s literal beginning starts with.
    """
    if outer == inner or (outer and set(outer) == {"*"}):
        return True
    if glob_is_literal(inner):
        return compile_pattern("glob", outer).test(inner)
    head = outer[:-1]
    if outer.endswith("*") and glob_is_literal(head):
        inner_head = inner[: min((inner.find(c) for c in "*?[" if c in inner), default=0)]
        return inner_head.startswith(head)
    return False


def _show(source: str) -> str:
    """The pattern as written in the config (escaped only if it holds unprintable text)."""
    return f"'{source}'" if source.isprintable() else repr(source)


def _utf8(text: str, what: str) -> bytes:
    if len(text) > MAX_INPUT_BYTES:
        raise Undecidable(f"{what} is longer than {MAX_INPUT_BYTES} bytes, the policy's bound")
    try:
        data = text.encode("utf-8")
    except UnicodeEncodeError:
        # SECURITY: JSON may carry lone surrogates ("\ud800"), which UTF-8 cannot encode.
        # They become U+FFFD, a character no pattern can name otherwise, so "." and "[^x]"
        # still consume them and a deny pattern around them keeps matching.
        data = text.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "replace").encode()
    if len(data) > MAX_INPUT_BYTES:
        raise Undecidable(f"{what} is longer than {MAX_INPUT_BYTES} bytes, the policy's bound")
    return data


def _glob_to_re2(glob: str) -> str:
    """RE2 source with ``fnmatch.fnmatchcase`` semantics, for a full match."""
    out = ["(?s)"]
    i, n = 0, len(glob)
    while i < n:
        c = glob[i]
        i += 1
        if c == "*":
            if out[-1] != ".*":
                out.append(".*")
        elif c == "?":
            out.append(".")
        elif c == "[":
            parsed = _glob_class(glob, i)
            if parsed is None:
                out.append(_char(c))
            else:
                text, i = parsed
                out.append(text)
        else:
            out.append(_char(c))
    return "".join(out)


def _glob_class(glob: str, start: int) -> tuple[str, int] | None:
    """The RE2 class for ``[...]`` whose body starts at ``start``, and the index after it;
    None when there is no closing ``]`` (then ``[`` is a literal)."""
    j, n = start, len(glob)
    if j < n and glob[j] == "!":
        j += 1
    if j < n and glob[j] == "]":
        j += 1
    while j < n and glob[j] != "]":
        j += 1
    if j >= n:
        return None
    body = glob[start:j]
    negate = body.startswith("!")
    if negate:
        body = body[1:]
    items: list[str] = []
    k = 0
    while k < len(body):
        if k + 2 < len(body) and body[k + 1] == "-":
            low, high = body[k], body[k + 2]
            if low <= high:  # a reversed range matches nothing, as in fnmatch
                items.append(f"{_char(low)}-{_char(high)}")
            k += 3
        else:
            items.append(_char(body[k]))
            k += 1
    if not items:
        # An empty set never matches; its negation matches any one character.
        return ("." if negate else r"[^\x{0}-\x{10ffff}]"), j + 1
    return f"[{'^' if negate else ''}{''.join(items)}]", j + 1


def _char(c: str) -> str:
    return c if c.isascii() and c.isalnum() else f"\\x{{{ord(c):x}}}"
