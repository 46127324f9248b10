"""References (``${inputs.x}``, ``${steps.fetch.output.items}``, ``${item}``) and ``when:``
conditions: parsed once when a workflow is loaded, evaluated on plain JSON values.

A reference is a root (``inputs``, ``steps``, ``item``, ``index``, ``run``) followed by
``.name`` and ``[n]`` parts; ``steps.<id>`` must be followed by ``.output``. A string that is
exactly one reference keeps the referenced value's JSON type; a reference inside other text
is interpolated (strings as they are, everything else as compact JSON).

A condition is a tiny language evaluated by this module, never by ``eval``::

    cond    := or
    or      := and ("or" and)*
    and     := not ("and" not)*
    not     := "not" not | compare
    compare := operand [("==" | "!=" | "<" | "<=" | ">" | ">=") operand]
    operand := reference | literal | "(" cond ")"
    literal := number | 'text' | "text" | true | false | null

A reference in a condition may be written with or without ``${ }``. A reference alone is
true unless it is null, false, 0, "", [] or {}. ``==``/``!=`` compare JSON values (``1 == 1.0``,
``"1" != 1``); ordering needs two numbers or two strings, anything else is an error naming the
condition. Evaluation is linear in the condition's size and touches nothing but its values.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

__all__ = [
    "Condition",
    "ExpressionError",
    "Reference",
    "Scope",
    "Template",
    "parse_condition",
    "parse_reference",
    "parse_template",
]

ROOTS = ("inputs", "steps", "item", "index", "run")
_REF = re.compile(r"\$\{([^{}]*)\}")
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_-]*")
_MAX_CONDITION = 2000


class ExpressionError(ValueError):
    """A reference or condition that cannot be parsed or evaluated; the text says why."""


@dataclass(frozen=True)
class Reference:
    """``root`` then ``path`` (names and list indexes); ``text`` is how it was written."""

    text: str
    root: str
    path: tuple[str | int, ...]

    @property
    def step(self) -> str | None:
        """The step a ``steps.<id>...`` reference reads, else None."""
        return str(self.path[0]) if self.root == "steps" else None


@dataclass(frozen=True)
class Scope:
    """What references resolve against while a step runs."""

    inputs: Mapping[str, Any]
    outputs: Mapping[str, Any]
    run: Mapping[str, Any]
    item: Any = None
    index: int | None = None
    has_item: bool = False


def parse_reference(text: str) -> Reference:
    """Parses ``inputs.x.y``, ``steps.fetch.output.items[0]``, ``item``; raises
    ``ExpressionError`` saying what is wrong."""
    source = text.strip()
    parts: list[str | int] = []
    position = 0
    match = _NAME.match(source)
    if match is None:
        raise ExpressionError(f"'{text}' is not a reference (e.g. inputs.day, steps.fetch.output)")
    root = match.group()
    position = match.end()
    while position < len(source):
        char = source[position]
        if char == ".":
            match = _NAME.match(source, position + 1)
            if match is None:
                raise ExpressionError(f"'{text}': a name must follow '.'")
            parts.append(match.group())
            position = match.end()
        elif char == "[":
            end = source.find("]", position)
            number = source[position + 1 : end] if end > 0 else ""
            if not number.isdigit():
                raise ExpressionError(f"'{text}': [..] takes a list index (a number)")
            parts.append(int(number))
            position = end + 1
        else:
            raise ExpressionError(f"'{text}': unexpected '{char}'")
    if root not in ROOTS:
        raise ExpressionError(f"'{text}': unknown root '{root}' (one of: {', '.join(ROOTS)})")
    if root == "steps" and (len(parts) < 2 or not isinstance(parts[0], str)):
        raise ExpressionError(f"'{text}': write steps.<step id>.output[...]")
    if root == "steps" and parts[1] != "output":
        raise ExpressionError(f"'{text}': a step is read through .output (steps.<id>.output)")
    if root == "index" and parts:
        raise ExpressionError(f"'{text}': index is a number and has no fields")
    return Reference(source, root, tuple(parts))


def resolve(reference: Reference, scope: Scope) -> Any:
    """The value ``reference`` names in ``scope``; raises ``ExpressionError`` naming the
    missing part."""
    if reference.root == "inputs":
        value: Any = dict(scope.inputs)
        path = reference.path
        where = "inputs"
    elif reference.root == "steps":
        step = str(reference.path[0])
        if step not in scope.outputs:
            raise ExpressionError(f"${{{reference.text}}}: step '{step}' has no output yet")
        value = scope.outputs[step]
        path = reference.path[2:]
        where = f"steps.{step}.output"
    elif reference.root == "run":
        value, path, where = dict(scope.run), reference.path, "run"
    elif reference.root == "index":
        if scope.index is None:
            raise ExpressionError(f"${{{reference.text}}}: only a for_each step has an index")
        return scope.index
    else:
        if not scope.has_item:
            raise ExpressionError(f"${{{reference.text}}}: only a for_each step has an item")
        value, path, where = scope.item, reference.path, "item"
    for part in path:
        if isinstance(part, int):
            if not isinstance(value, list) or part >= len(value):
                raise ExpressionError(
                    f"${{{reference.text}}}: {where} has no element [{part}]"
                    + ("" if isinstance(value, list) else f" (it is {_kind(value)})")
                )
            value = value[part]
            where += f"[{part}]"
        else:
            if not isinstance(value, dict) or part not in value:
                raise ExpressionError(
                    f"${{{reference.text}}}: {where} has no key '{part}'"
                    + ("" if isinstance(value, dict) else f" (it is {_kind(value)})")
                )
            value = value[part]
            where += f".{part}"
    return value


# -- templates: values with references in their strings ----------------------------------


@dataclass(frozen=True)
class Template:
    """A JSON value whose strings may hold references; ``render`` fills them in."""

    value: Any

    def references(self) -> list[Reference]:
        return list(_references_in(self.value))

    def render(self, scope: Scope) -> Any:
        return _render(self.value, scope)


def parse_template(value: Any) -> Template:
    """Checks every reference in ``value``'s strings; raises ``ExpressionError``."""
    for _ in _references_in(value):
        pass
    return Template(value)


def _references_in(value: Any) -> Iterator[Reference]:
    if isinstance(value, str):
        for match in _REF.finditer(value):
            yield parse_reference(match.group(1))
        rest = _REF.sub("", value)
        if "${" in rest:
            raise ExpressionError(f"'{value[:80]}': an unclosed or nested '${{'")
    elif isinstance(value, list):
        for element in value:
            yield from _references_in(element)
    elif isinstance(value, dict):
        for element in value.values():
            yield from _references_in(element)


def _render(value: Any, scope: Scope) -> Any:
    if isinstance(value, str):
        whole = _REF.fullmatch(value)
        if whole is not None:
            return resolve(parse_reference(whole.group(1)), scope)
        return _REF.sub(lambda m: _text(resolve(parse_reference(m.group(1)), scope)), value)
    if isinstance(value, list):
        return [_render(element, scope) for element in value]
    if isinstance(value, dict):
        return {key: _render(element, scope) for key, element in value.items()}
    return value


def _text(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value, separators=(",", ":"))


def _kind(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int | float):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "a list"
    return "an object"


# -- conditions ---------------------------------------------------------------------------

_TOKEN = re.compile(
    r"""\s*(?:
        (?P<ref>\$\{[^{}]*\})
      | (?P<op>==|!=|<=|>=|<|>)
      | (?P<paren>[()])
      | (?P<number>-?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?)
      | (?P<string>'[^'\\]*(?:\\.[^'\\]*)*'|"[^"\\]*(?:\\.[^"\\]*)*")
      | (?P<word>[A-Za-z_][A-Za-z0-9_.\[\]-]*)
    )""",
    re.VERBOSE,
)
_LITERALS: dict[str, Any] = {"true": True, "false": False, "null": None}


@dataclass(frozen=True)
class _Node:
    kind: str  # "ref", "lit", "not", "and", "or", "cmp"
    value: Any = None
    children: tuple[_Node, ...] = ()


@dataclass(frozen=True)
class Condition:
    """A parsed ``when:``; ``evaluate`` answers True or False or raises ``ExpressionError``."""

    text: str
    _root: _Node

    def references(self) -> list[Reference]:
        found: list[Reference] = []
        stack = [self._root]
        while stack:
            node = stack.pop()
            if node.kind == "ref":
                found.append(node.value)
            stack.extend(node.children)
        return found

    def evaluate(self, scope: Scope) -> bool:
        return _truthy(_evaluate(self._root, scope, self.text))


def parse_condition(text: str) -> Condition:
    """Parses a ``when:`` condition; raises ``ExpressionError`` saying where it is wrong."""
    if len(text) > _MAX_CONDITION:
        raise ExpressionError(f"condition longer than {_MAX_CONDITION} characters")
    tokens = _tokens(text)
    parser = _Parser(tokens, text)
    root = parser.parse_or()
    if parser.position != len(tokens):
        raise ExpressionError(f"'{text}': unexpected '{tokens[parser.position][1]}'")
    return Condition(text, root)


def _tokens(text: str) -> list[tuple[str, str]]:
    tokens: list[tuple[str, str]] = []
    position = 0
    stripped = text.rstrip()
    while position < len(stripped):
        match = _TOKEN.match(stripped, position)
        if match is None or match.end() == position:
            raise ExpressionError(f"'{text}': cannot read '{stripped[position:][:20]}'")
        kind = match.lastgroup or ""
        tokens.append((kind, match.group(kind)))
        position = match.end()
    if not tokens:
        raise ExpressionError("an empty condition")
    return tokens


class _Parser:
    def __init__(self, tokens: list[tuple[str, str]], text: str) -> None:
        self.tokens = tokens
        self.position = 0
        self.text = text

    def peek(self) -> tuple[str, str] | None:
        return self.tokens[self.position] if self.position < len(self.tokens) else None

    def take(self) -> tuple[str, str]:
        token = self.peek()
        if token is None:
            raise ExpressionError(f"'{self.text}': ends too early")
        self.position += 1
        return token

    def keyword(self, word: str) -> bool:
        token = self.peek()
        if token == ("word", word):
            self.position += 1
            return True
        return False

    def parse_or(self) -> _Node:
        node = self.parse_and()
        while self.keyword("or"):
            node = _Node("or", children=(node, self.parse_and()))
        return node

    def parse_and(self) -> _Node:
        node = self.parse_not()
        while self.keyword("and"):
            node = _Node("and", children=(node, self.parse_not()))
        return node

    def parse_not(self) -> _Node:
        if self.keyword("not"):
            return _Node("not", children=(self.parse_not(),))
        return self.parse_compare()

    def parse_compare(self) -> _Node:
        left = self.parse_operand()
        token = self.peek()
        if token is not None and token[0] == "op":
            self.position += 1
            return _Node("cmp", token[1], (left, self.parse_operand()))
        return left

    def parse_operand(self) -> _Node:
        kind, value = self.take()
        if kind == "paren" and value == "(":
            node = self.parse_or()
            if self.take() != ("paren", ")"):
                raise ExpressionError(f"'{self.text}': a '(' is not closed")
            return node
        if kind == "ref":
            return _Node("ref", parse_reference(value[2:-1]))
        if kind == "number":
            number = float(value)
            return _Node("lit", int(number) if number.is_integer() and "." not in value else number)
        if kind == "string":
            return _Node("lit", _unquote(value))
        if kind == "word":
            if value in _LITERALS:
                return _Node("lit", _LITERALS[value])
            if value in ("and", "or", "not"):
                raise ExpressionError(f"'{self.text}': '{value}' needs an operand before it")
            return _Node("ref", parse_reference(value))
        raise ExpressionError(f"'{self.text}': unexpected '{value}'")


def _unquote(token: str) -> str:
    body = token[1:-1]
    return re.sub(r"\\(.)", r"\1", body)


def _evaluate(node: _Node, scope: Scope, text: str) -> Any:
    if node.kind == "lit":
        return node.value
    if node.kind == "ref":
        return resolve(node.value, scope)
    if node.kind == "not":
        return not _truthy(_evaluate(node.children[0], scope, text))
    if node.kind == "and":
        return _truthy(_evaluate(node.children[0], scope, text)) and _truthy(
            _evaluate(node.children[1], scope, text)
        )
    if node.kind == "or":
        return _truthy(_evaluate(node.children[0], scope, text)) or _truthy(
            _evaluate(node.children[1], scope, text)
        )
    left = _evaluate(node.children[0], scope, text)
    right = _evaluate(node.children[1], scope, text)
    return _compare(node.value, left, right, text)


def _compare(op: str, left: Any, right: Any, text: str) -> bool:
    if op in ("==", "!="):
        equal = _json_equal(left, right)
        return equal if op == "==" else not equal
    numbers = _is_number(left) and _is_number(right)
    strings = isinstance(left, str) and isinstance(right, str)
    if not (numbers or strings):
        raise ExpressionError(f"'{text}': cannot order {_kind(left)} and {_kind(right)} with {op}")
    if op == "<":
        return bool(left < right)
    if op == "<=":
        return bool(left <= right)
    if op == ">":
        return bool(left > right)
    return bool(left >= right)


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _json_equal(left: Any, right: Any) -> bool:
    if isinstance(left, bool) or isinstance(right, bool):
        return isinstance(left, bool) and isinstance(right, bool) and left == right
    if _is_number(left) and _is_number(right):
        return bool(left == right)
    if type(left) is not type(right):
        return False
    return bool(left == right)


def _truthy(value: Any) -> bool:
    if value is None or value is False:
        return False
    if _is_number(value):
        return bool(value != 0)
    if isinstance(value, str | list | dict):
        return len(value) > 0
    return bool(value)
