"""Checking a call's arguments against the tool's JSON Schema.

Obvious coercions happen first, driven by the schema (the shell stubs send every value as a
string): ``"42"`` → 42 for integers, ``"true"`` → True for booleans, a JSON text → the
object or array a parameter expects, a number → its text for strings. Defaults from the schema
are filled in. The result is the object the policy evaluates and the executor receives, the
same object (GW-07). Errors name the field path so a model can fix its call.
"""

from __future__ import annotations

import json
from typing import Any

from jsonschema import Draft202012Validator
from jsonschema.exceptions import best_match

from sandgate.errors import InvalidArguments

__all__ = ["validate_arguments"]


def validate_arguments(tool: str, schema: dict[str, Any], arguments: Any) -> dict[str, Any]:
    """The coerced, defaulted arguments; raises ``InvalidArguments`` naming the field."""
    if not isinstance(arguments, dict):
        raise InvalidArguments(f"{tool}: arguments must be an object of named parameters")
    properties: dict[str, Any] = schema.get("properties", {})
    coerced = {name: _coerce(value, properties.get(name, {})) for name, value in arguments.items()}
    for name, prop in properties.items():
        if name not in coerced and isinstance(prop, dict) and "default" in prop:
            coerced[name] = prop["default"]
    error = best_match(Draft202012Validator(schema).iter_errors(coerced))
    if error is not None:
        where = ".".join(str(part) for part in error.absolute_path)
        field = f"argument '{where}'" if where else "arguments"
        raise InvalidArguments(f"{tool}: {field}: {error.message}")
    return coerced


def _coerce(value: Any, prop: Any) -> Any:
    if not isinstance(prop, dict):
        return value
    kinds = prop.get("type")
    types = set(kinds) if isinstance(kinds, list) else {kinds}
    if isinstance(value, str):
        text = value.strip()
        if "integer" in types and _is_int(text):
            return int(text)
        if "number" in types and _is_float(text):
            number = float(text)
            return int(number) if number.is_integer() and "." not in text else number
        if "boolean" in types and text.lower() in ("true", "false"):
            return text.lower() == "true"
        if types & {"object", "array"} and text[:1] in ("{", "["):
            try:
                return json.loads(text)
            except ValueError:
                return value
    elif "string" in types and not isinstance(value, bool) and isinstance(value, int | float):
        return str(value)
    return value


def _is_int(text: str) -> bool:
    return text.lstrip("+-").isdigit()


def _is_float(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return text.lower() not in ("nan", "inf", "+inf", "-inf", "infinity")
