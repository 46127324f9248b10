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
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from jsonschema import Draft202012Validator, validators
from jsonschema.exceptions import best_match

from sandgate.errors import InvalidArguments
from sandgate.strictjson import StrictJsonError, check_value

__all__ = ["validate_arguments"]

#: Compiled validators by schema object (a tool's schema lives as long as the tool); the
#: schema itself is kept so an ``id`` is never reused for another schema while cached.
_VALIDATORS: dict[int, tuple[dict[str, Any], Draft202012Validator]] = {}
_VALIDATORS_MAX = 4096


def _is_integer(_: Any, instance: Any) -> bool:
    return isinstance(instance, int) and not isinstance(instance, bool)


_extend: Callable[..., type[Draft202012Validator]] = validators.extend
#: Draft 2020-12 with ``integer`` meaning a JSON integer literal (``3``), never ``3.0``.
_StrictValidator = _extend(
    Draft202012Validator,
    type_checker=Draft202012Validator.TYPE_CHECKER.redefine("integer", _is_integer),
)


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
    validator = _validator(schema)
    if validator.is_valid(checked):
        return checked  # the common case; ranking errors (below) costs twice the check
    error = best_match(validator.iter_errors(checked))
    if error is not None:
        where = ".".join(str(part) for part in error.absolute_path)
        field = f"argument '{where}'" if where else "arguments"
        raise InvalidArguments(f"{tool}: {field}: {error.message}")
    return checked


def _validator(schema: dict[str, Any]) -> Draft202012Validator:
    """The schema's validator, built once: building one (and its reference resolver) costs
    more than validating a small call's arguments."""
    cached = _VALIDATORS.get(id(schema))
    if cached is not None and cached[0] is schema:
        return cached[1]
    if len(_VALIDATORS) >= _VALIDATORS_MAX:
        _VALIDATORS.clear()  # schemas of tools since replaced (a reload); rebuilt on use
    validator = _StrictValidator(schema)
    _VALIDATORS[id(schema)] = (schema, validator)
    return validator
