"""Checking a call's arguments against the tool's JSON Schema, without coercion.

The arguments must already be what the schema asks for: ``"42"`` is not an integer, ``1`` is
not ``true``, ``42`` is not a string, ``3.0`` is not an integer (stricter than JSON Schema, so
an executor never receives a float where it was promised an int), and a JSON *text* is not an
object. Converting command-line text is the job of the caller that has text: the generated
command-line stubs convert ``--count 42`` by the schema before sending (``tools.stubs``).
Before the schema runs, the value must be one ``sandgate.strictjson`` could have produced (no
``NaN``/``Infinity``, no lone surrogate, integers within int64, nesting within its cap), whoever
decoded it (the gateway socket, MCP, the agent runner). Defaults from the schema are filled
in. The result is the object the policy evaluates and the executor receives, the same object
(GW-07). Errors name the field path so a model can fix its call.

Two validators read each schema. ``jsonschema`` (Python) is the reference: its verdict and its
message stand whenever a call is refused. A compiled one (``jsonschema-rs``) checks the common
case, a call that passes, in well under a microsecond where the reference takes ~25 µs on the
gateway's event loop (docs/benchmarks.md, "Tool calls"); it may only *accept*, and only where
the two cannot disagree: never for a schema with a regular expression (``pattern``,
``patternProperties``: two regex engines) or a fractional ``multipleOf`` (``0.3`` is a
multiple of ``0.1`` to one and not to the other: floating-point division), never for
arguments holding a float (``3.0`` is an integer to JSON Schema, not here; float arithmetic
is where the two implementations part) or a tuple, and never for a schema it cannot build
offline (it refuses to fetch a remote ``$ref``). Whatever it does not accept, the reference
decides.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import jsonschema_rs
from jsonschema import Draft202012Validator, validators
from jsonschema.exceptions import SchemaError, best_match
from referencing.exceptions import Unresolvable

from sandgate.errors import InvalidArguments, ToolFailed
from sandgate.strictjson import StrictJsonError, check_value

__all__ = ["schema_problem", "validate_arguments"]

#: Validators by schema object (a tool's schema lives as long as the tool); the schema itself
#: is kept so an ``id`` is never reused for another schema while cached.
_VALIDATORS: dict[int, _Validators] = {}
_VALIDATORS_MAX = 4096
#: Keywords whose verdict depends on a regex engine: the compiled validator's is not Python's.
_REGEX_KEYWORDS = frozenset({"pattern", "patternProperties"})


def _is_integer(_: Any, instance: Any) -> bool:
    return isinstance(instance, int) and not isinstance(instance, bool)


_extend: Callable[..., type[Draft202012Validator]] = validators.extend
#: Draft 2020-12 with ``integer`` meaning a JSON integer literal (``3``), never ``3.0``.
_StrictValidator = _extend(
    Draft202012Validator,
    type_checker=Draft202012Validator.TYPE_CHECKER.redefine("integer", _is_integer),
)


@dataclass(frozen=True)
class _Validators:
    schema: dict[str, Any]
    reference: Draft202012Validator
    #: Accepts what the reference accepts, compiled; None where the two could disagree.
    fast: jsonschema_rs.Validator | None


def validate_arguments(tool: str, schema: dict[str, Any], arguments: Any) -> dict[str, Any]:
    """The defaulted arguments, unchanged otherwise; raises ``InvalidArguments`` naming the
    field."""
    if not isinstance(arguments, dict):
        raise InvalidArguments(f"{tool}: arguments must be an object of named parameters")
    try:
        check_value(arguments)
    except StrictJsonError as exc:
        raise InvalidArguments(f"{tool}: arguments are not strict JSON: {exc}") from None
    properties: dict[str, Any] = schema.get("properties", {})
    checked = dict(arguments)
    for name, prop in properties.items():
        if name not in checked and isinstance(prop, dict) and "default" in prop:
            checked[name] = prop["default"]
    checkers = _validators(tool, schema)
    if checkers.fast is not None and _plain(checked) and checkers.fast.is_valid(checked):
        return checked  # the common case, compiled
    # Refused by the compiled validator (or not its to judge): the reference decides, and
    # names the field.
    try:
        error = best_match(checkers.reference.iter_errors(checked))
    except Unresolvable as exc:  # a ``$ref`` to nowhere: the tool's definition is broken
        raise _broken(tool, f"a $ref it holds does not resolve ({exc})") from None
    if error is not None:
        where = ".".join(str(part) for part in error.absolute_path)
        field = f"argument '{where}'" if where else "arguments"
        raise InvalidArguments(f"{tool}: {field}: {error.message}")
    return checked


def schema_problem(schema: Any) -> str | None:
    """What makes ``schema`` no JSON Schema (2020-12), or None: checked when a tool's
    configuration loads, and before a tool from elsewhere (an MCP server) is first called."""
    try:
        _StrictValidator.check_schema(schema)
    except SchemaError as exc:
        where = "/".join(str(part) for part in exc.absolute_path)
        return f"{exc.message}" + (f" (at {where})" if where else "")
    return None


def _broken(tool: str, why: str) -> ToolFailed:
    return ToolFailed(
        f"{tool}: its parameter schema is not usable: {why}; the tool's definition must be "
        "fixed (a valid JSON Schema 2020-12 object schema)"
    )


def _validators(tool: str, schema: dict[str, Any]) -> _Validators:
    """The schema's validators, built once: building one costs more than validating a small
    call's arguments. Raises ``ToolFailed`` for a schema that is no JSON Schema."""
    cached = _VALIDATORS.get(id(schema))
    if cached is not None and cached.schema is schema:
        return cached
    problem = schema_problem(schema)
    if problem is not None:
        raise _broken(tool, problem)
    if len(_VALIDATORS) >= _VALIDATORS_MAX:
        _VALIDATORS.clear()  # schemas of tools since replaced (a reload); rebuilt on use
    built = _Validators(schema, _StrictValidator(schema), _compiled(schema))
    _VALIDATORS[id(schema)] = built
    return built


def _compiled(schema: dict[str, Any]) -> jsonschema_rs.Validator | None:
    """The compiled validator, or None where its verdict could differ from the reference's:
    a schema with a regex or a fractional ``multipleOf``, or one it will not build (not valid
    against the 2020-12 meta-schema, a ``$ref`` it would have to fetch)."""
    if _judged_differently(schema):
        return None
    try:
        return jsonschema_rs.Draft202012Validator(schema, validate_formats=False, offline=True)
    except (ValueError, TypeError):  # jsonschema_rs.ValidationError is a ValueError
        return None


def _judged_differently(schema: Any) -> bool:
    """Whether a keyword the two validators judge differently appears anywhere in the schema:
    a regex, a ``multipleOf`` that is a float (a property merely *named* ``pattern`` counts
    too: the reference then decides, which is never wrong)."""
    stack = [schema]
    while stack:
        node = stack.pop()
        if isinstance(node, dict):
            if not _REGEX_KEYWORDS.isdisjoint(node):
                return True
            if isinstance(node.get("multipleOf"), float):
                return True
            stack.extend(node.values())
        elif isinstance(node, list):
            stack.extend(node)
    return False


def _plain(value: Any) -> bool:
    """Whether the compiled validator may judge ``value``: no float (``3.0`` is an integer to
    JSON Schema, never to Sandgate, and float arithmetic is where the two differ) and no
    tuple (an array to one validator, not to the other). ``check_value`` has already bounded
    the depth."""
    stack = [value]
    while stack:
        node = stack.pop()
        if isinstance(node, dict):
            stack.extend(node.values())
        elif isinstance(node, list):
            stack.extend(node)
        elif isinstance(node, (float, tuple)):
            return False
    return True
