"""Strict JSON: the one decoder every edge uses (stdlib only; it also ships inside the guest).

Why: two parsers that read one document differently are a policy bypass. Python's ``json``
keeps the *last* of two equal keys, other parsers keep the first, so a handler and a policy
could act on different values of ``{"path": "a", "path": "b"}``. It also accepts ``NaN`` and
``Infinity``, lone surrogates (``"\\ud800"``, which UTF-8 cannot encode), integers of any size
(CPython refuses to convert more than 4300 digits with a ``ValueError`` an edge would turn into
a 500) and nesting until the interpreter's recursion limit. :func:`loads` accepts exactly the
documents on which every conforming parser agrees, or raises :class:`StrictJsonError`:

* UTF-8 only (no BOM, no other encoding), valid JSON (RFC 8259), nothing after the value;
* no duplicate key in any object, at any depth;
* no ``NaN``/``Infinity``/``-Infinity``, no float literal that overflows to infinity;
* integers within :data:`MIN_INT`..\\ :data:`MAX_INT` (int64, what proto3 and every SDK
  can hold), refused by length before any conversion;
* no lone surrogate (escaped or raw) in a string or a key, unless ``allow_surrogates``;
* at most :data:`MAX_DEPTH` nested arrays/objects.

:func:`check_value` applies the same rules (except duplicates, which a parsed value can no
longer show) to a value someone else decoded, such as MCP tool arguments.

Cost: the C decoder does the parsing; the hooks run per object and per number. The depth
measure (``bytes.translate`` keeps quotes and brackets, ``itertools.accumulate`` sums) and the
surrogate walk run only when a byte scan says they could matter (more brackets than the cap; a
``\\ud..`` escape or a raw surrogate), so a small request pays a few microseconds more than
``json.loads`` and a large document a small multiple (``bench/strict_json.py``).

Imports: only modules built into CPython (``_json``'s scanner, the one ``json.loads`` uses,
driven directly; ``math``, ``itertools``). ``json`` itself pulls in ``re`` and ``enum``, ~10 ms
of every sandbox's start, since the guest decodes its first request with this module.
"""

from __future__ import annotations

import math
from _json import encode_basestring_ascii, make_scanner
from itertools import accumulate

TYPE_CHECKING = False  # not typing's: the guest's start never imports typing (guest/_loop.py)
if TYPE_CHECKING:
    from typing import Any

__all__ = [
    "CODE",
    "MAX_DEPTH",
    "MAX_INT",
    "MIN_INT",
    "StrictJsonError",
    "check_value",
    "loads",
    "loads_object",
]

#: The stable error code of every refusal (mapped to HTTP 400 / Connect ``invalid_argument``).
CODE = "invalid_json"
#: Deepest nesting of arrays and objects accepted (a top-level ``{}`` has depth 1).
MAX_DEPTH = 64
#: Integer range accepted: int64, what proto3 JSON and the E2B SDKs can represent.
MAX_INT = 2**63 - 1
MIN_INT = -(2**63)
_MAX_DIGITS = len(str(MAX_INT))  # 19: a longer literal (JSON has no leading zeros) is too big

_NOT_STRUCTURE = bytes(b for b in range(256) if b not in b'"[]{}')
_STEPS = bytes.maketrans(b"[{]}", b"\x01\x01\xff\xff")  # as signed bytes: +1 / -1


class StrictJsonError(ValueError):
    """The document is not strict JSON; the message says what and where. ``syntax`` tells
    malformed JSON (or bytes that are not UTF-8) from well-formed JSON that breaks a rule."""

    code = CODE

    def __init__(self, message: str, *, syntax: bool = False) -> None:
        super().__init__(message)
        self.syntax = syntax

    def describe(self, subject: str) -> str:
        """``"<subject> is not valid JSON: ..."`` or ``"<subject> is not strict JSON: ..."``."""
        return f"{subject} is not {'valid' if self.syntax else 'strict'} JSON: {self}"


def _object(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    result = dict(pairs)
    if len(result) != len(pairs):
        seen: set[str] = set()
        for key, _ in pairs:
            if key in seen:
                raise StrictJsonError(f"duplicate key {_shown(key)} in one object")
            seen.add(key)
    return result


def _int(text: str) -> int:
    if len(text.lstrip("-")) > _MAX_DIGITS:
        raise StrictJsonError(f"integer {text[:24]}... is outside the int64 range")
    value = int(text)
    if not MIN_INT <= value <= MAX_INT:
        raise StrictJsonError(f"integer {text} is outside the int64 range")
    return value


def _float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise StrictJsonError(f"number {text[:24]} is too large for a double")
    return value


def _constant(text: str) -> Any:
    raise StrictJsonError(f"{text} is not JSON (use a number or null)")


class _Context:
    """What ``_json.make_scanner`` reads from a ``json.JSONDecoder``: our hooks, strict
    strings (no raw control characters)."""

    strict = True
    object_hook = None
    object_pairs_hook = staticmethod(_object)
    parse_float = staticmethod(_float)
    parse_int = staticmethod(_int)
    parse_constant = staticmethod(_constant)


_scan = make_scanner(_Context())  # type: ignore[arg-type]  # typeshed: context is a scanner
#: JSON's whitespace (RFC 8259), all that may surround the value.
_WHITESPACE = " \t\n\r"


def _decode(text: str) -> Any:
    """``json.JSONDecoder.decode`` with the scanner above, its messages included."""
    start = len(text) - len(text.lstrip(_WHITESPACE))
    try:
        try:
            value, end = _scan(text, start)
        except SystemError:
            # CPython 3.11's scanner words its errors with json.decoder.JSONDecodeError, which
            # it looks up in sys.modules without importing it: load it (once, on the first
            # malformed document of a process that never imported json) and scan again.
            import json.decoder  # noqa: F401

            value, end = _scan(text, start)
    except StopIteration as stop:
        raise _syntax("Expecting value", text, stop.value) from None
    rest = text[end:]
    if rest.strip(_WHITESPACE):
        raise _syntax("Extra data", text, end + len(rest) - len(rest.lstrip(_WHITESPACE)))
    return value


def _syntax(message: str, text: str, pos: int) -> StrictJsonError:
    """A syntax error worded as ``json.JSONDecodeError`` words it."""
    line = text.count("\n", 0, pos) + 1
    column = pos - text.rfind("\n", 0, pos)
    return StrictJsonError(f"{message}: line {line} column {column} (char {pos})", syntax=True)


def loads(
    data: bytes | bytearray | memoryview | str,
    *,
    allow_surrogates: bool = False,
    max_depth: int = MAX_DEPTH,
) -> Any:
    """The value of one strict JSON document; raises :class:`StrictJsonError`.

    ``allow_surrogates`` keeps lone surrogates (escaped only: the bytes must still be UTF-8);
    the guest protocol needs it, because it carries non-UTF-8 file names as
    ``surrogateescape`` code points. Never raises anything else for any input.
    """
    raw_surrogate = False
    if isinstance(data, str):
        text = data
        raw_surrogate = _has_surrogate(text)
        escapes = "\\ud" in text or "\\uD" in text
        brackets = text.count("[") + text.count("{")
        raw = b""  # encoded only if the depth must be measured
    else:
        raw = bytes(data)
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise StrictJsonError(
                f"not UTF-8: invalid byte at offset {exc.start}", syntax=True
            ) from None
        escapes = b"\\ud" in raw or b"\\uD" in raw  # bytes search: memchr speed
        brackets = raw.count(b"[") + raw.count(b"{")
    if text.startswith("\ufeff"):
        raise StrictJsonError("starts with a byte-order mark: send plain UTF-8", syntax=True)
    try:
        value = _decode(text)
    except StrictJsonError:
        raise
    except RecursionError:
        raise StrictJsonError(f"nested deeper than {max_depth} levels") from None
    except ValueError as exc:  # the scanner's JSONDecodeError; CPython's int-digit limit
        raise StrictJsonError(str(exc), syntax=True) from None
    if not allow_surrogates and (raw_surrogate or escapes):
        _walk(value, max_depth, check_strings=True, check_types=False)
    elif brackets > max_depth and _depth(raw or text.encode("utf-8", "surrogatepass")) > max_depth:
        raise StrictJsonError(f"nested deeper than {max_depth} levels")
    return value


def loads_object(
    data: bytes | bytearray | memoryview | str,
    *,
    allow_surrogates: bool = False,
) -> dict[str, Any]:
    """Like :func:`loads`, for documents whose top level must be an object."""
    value = loads(data, allow_surrogates=allow_surrogates)
    if not isinstance(value, dict):
        raise StrictJsonError("the top level must be a JSON object")
    return value


def check_value(value: Any, *, max_depth: int = MAX_DEPTH, allow_surrogates: bool = False) -> None:
    """Raises :class:`StrictJsonError` unless ``value`` is what :func:`loads` could return.

    Accepts dicts with string keys, lists (and tuples), strings, booleans, ``None``, integers
    in range and finite floats, nested at most ``max_depth`` levels. The message names the
    offending place as a path such as ``$.filters[2].city``.
    """
    _walk(value, max_depth, check_strings=not allow_surrogates, check_types=True)


def _depth(raw: bytes) -> int:
    """The nesting depth of a *valid* document, at C speed: drop escape pairs (so every
    remaining quote delimits a string), keep only quotes and brackets, drop what lies between
    quotes, map brackets to +1/-1 and take the largest running sum."""
    if b"\\" in raw:
        # Escaped backslashes first, left to right as the pairs fall; then what remains
        # escaped that matters here, a quote (the other escapes hold no quote or bracket).
        raw = raw.replace(b"\\\\", b"").replace(b'\\"', b"")
    outside = b"".join(raw.translate(None, _NOT_STRUCTURE).split(b'"')[::2])
    return max(accumulate(memoryview(outside.translate(_STEPS)).cast("b")), default=0)


def _walk(root: Any, max_depth: int, *, check_strings: bool, check_types: bool) -> None:
    stack: list[tuple[Any, int, str]] = [(root, 0, "$")]
    while stack:
        node, depth, where = stack.pop()
        if isinstance(node, dict):
            if depth + 1 > max_depth:
                raise StrictJsonError(f"nested deeper than {max_depth} levels at {where}")
            for key, item in node.items():
                if not isinstance(key, str):
                    raise StrictJsonError(f"key {key!r} at {where} is not a string")
                if check_strings and _has_surrogate(key):
                    raise StrictJsonError(f"key {_shown(key)} at {where} has a lone surrogate")
                stack.append((item, depth + 1, _child(where, f".{_shown_key(key)}")))
        elif isinstance(node, (list, tuple)):
            if depth + 1 > max_depth:
                raise StrictJsonError(f"nested deeper than {max_depth} levels at {where}")
            for index, item in enumerate(node):
                stack.append((item, depth + 1, _child(where, f"[{index}]")))
        elif isinstance(node, str):
            if check_strings and _has_surrogate(node):
                raise StrictJsonError(f"string at {where} has a lone surrogate")
        elif not check_types or node is None or isinstance(node, bool):
            continue
        elif isinstance(node, int):
            if not MIN_INT <= node <= MAX_INT:
                raise StrictJsonError(f"integer at {where} is outside the int64 range")
        elif isinstance(node, float):
            if not math.isfinite(node):
                raise StrictJsonError(f"number at {where} is {node!r}, which JSON cannot hold")
        else:
            raise StrictJsonError(f"value at {where} is of type {type(node).__name__}, not JSON")


def _has_surrogate(text: str) -> bool:
    """Whether ``text`` holds a surrogate code point: the only ones UTF-8 cannot encode."""
    if text.isascii():
        return False
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return True
    return False


def _child(where: str, step: str) -> str:
    """The path of a child, elided in the middle once long (paths end up in messages)."""
    path = where + step
    return path if len(path) <= 120 else f"{path[:40]}...{path[-60:]}"


def _shown(key: str) -> str:
    """A key for an error message: quoted, escaped, short (keys are attacker-chosen)."""
    text = encode_basestring_ascii(key[:64])
    return text if len(key) <= 64 else text[:-1] + '..."'


def _shown_key(key: str) -> str:
    return key if key.isidentifier() and len(key) <= 64 else f"[{_shown(key)}]"
