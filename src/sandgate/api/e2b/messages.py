"""Reading fields of proto3-JSON request messages (envd's Connect-RPC), strictly.

A field's value must have its proto3 JSON type: a string is not a number, a number is not a
boolean, ``1.0`` is not an integer. ``null`` means "not set" (proto3 JSON). Two coercions are
part of the proto3 JSON mapping and are accepted (docs/compatibility.md): an integer field may
be sent as a decimal string (``"pid": "42"``, how int64 values travel), and an enum as its
name or its number. A field has two JSON names when its proto name has an underscore
(``include_entry`` / ``includeEntry``); a message that sets both is refused, as Go's protojson
(envd) refuses it, so no reader can pick the other one. Unknown fields are ignored, as
connect-go's JSON codec does. Every refusal is Connect ``invalid_argument`` naming the field.
"""

from __future__ import annotations

import re
from typing import Any, Final

from sandgate.api.e2b.connect import RpcError
from sandgate.strictjson import CODE

__all__ = [
    "UINT32",
    "boolean",
    "enum",
    "integer",
    "message",
    "string",
    "string_list",
    "string_map",
]

_DECIMAL: Final = re.compile(r"^-?(?:0|[1-9][0-9]{0,18})$")
UINT32: Final = (0, 2**32 - 1)


def _invalid(where: str, what: str) -> RpcError:
    return RpcError("invalid_argument", f"{where} {what}")


def _get(m: dict[str, Any], camel: str, snake: str | None, where: str) -> Any:
    if snake is not None and snake != camel and camel in m and snake in m:
        raise RpcError(
            "invalid_argument",
            f"{CODE}: field {where}{camel} is given twice, as {snake!r} and {camel!r}",
        )
    if camel in m:
        return m[camel]
    return m.get(snake) if snake is not None else None


def message(
    m: dict[str, Any], camel: str, snake: str | None = None, *, where: str = ""
) -> dict[str, Any] | None:
    """A nested message, or None when unset."""
    value = _get(m, camel, snake, where)
    if value is None or isinstance(value, dict):
        return value
    raise _invalid(f"{where}{camel}", "must be an object")


def string(
    m: dict[str, Any], camel: str, snake: str | None = None, *, where: str = ""
) -> str | None:
    """A string field, or None when unset."""
    value = _get(m, camel, snake, where)
    if value is None or isinstance(value, str):
        return value
    raise _invalid(f"{where}{camel}", "must be a string")


def boolean(
    m: dict[str, Any],
    camel: str,
    snake: str | None = None,
    *,
    default: bool = False,
    where: str = "",
) -> bool:
    """A bool field (``true``/``false`` only), ``default`` when unset."""
    value = _get(m, camel, snake, where)
    if value is None:
        return default
    if isinstance(value, bool):
        return value
    raise _invalid(f"{where}{camel}", "must be true or false")


def integer(
    m: dict[str, Any],
    camel: str,
    snake: str | None = None,
    *,
    bounds: tuple[int, int] = UINT32,
    where: str = "",
) -> int | None:
    """An integer field within ``bounds`` (a JSON integer or its decimal string), or None
    when unset."""
    value = _get(m, camel, snake, where)
    if value is None:
        return None
    if isinstance(value, str) and _DECIMAL.fullmatch(value):
        value = int(value)
    if not isinstance(value, int) or isinstance(value, bool):
        raise _invalid(f"{where}{camel}", "must be an integer")
    low, high = bounds
    if not low <= value <= high:
        raise _invalid(f"{where}{camel}", f"must be between {low} and {high}")
    return value


def enum(m: dict[str, Any], camel: str, values: dict[str, int], *, where: str = "") -> int | None:
    """An enum field as its number: its name in ``values`` or one of their numbers."""
    value = _get(m, camel, None, where)
    if value is None:
        return None
    if isinstance(value, str) and value in values:
        return values[value]
    if isinstance(value, int) and not isinstance(value, bool) and value in values.values():
        return value
    raise _invalid(f"{where}{camel}", f"must be one of {', '.join(values)}")


def string_list(m: dict[str, Any], camel: str, *, where: str = "") -> list[str]:
    """A repeated string field (``[]`` when unset)."""
    value = _get(m, camel, None, where)
    if value is None:
        return []
    if isinstance(value, list) and all(isinstance(item, str) for item in value):
        return value
    raise _invalid(f"{where}{camel}", "must be a list of strings")


def string_map(m: dict[str, Any], camel: str, *, where: str = "") -> dict[str, str]:
    """A ``map<string, string>`` field (``{}`` when unset)."""
    value = _get(m, camel, None, where)
    if value is None:
        return {}
    if isinstance(value, dict) and all(isinstance(item, str) for item in value.values()):
        return value
    raise _invalid(f"{where}{camel}", "must map strings to strings")
