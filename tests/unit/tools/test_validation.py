"""Argument validation: no coercion, strict JSON values, defaults, errors naming the field."""

from typing import Any

import pytest

from sandgate.errors import InvalidArguments
from sandgate.tools.names import canonical_name
from sandgate.tools.validation import validate_arguments

SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "count": {"type": "integer", "minimum": 1},
        "ratio": {"type": "number"},
        "flag": {"type": "boolean"},
        "tags": {"type": "array", "items": {"type": "string"}},
        "name": {"type": "string"},
        "filters": {"type": "object", "properties": {"city": {"type": "string"}}},
        "mode": {"type": "string", "default": "fast"},
    },
    "required": ["count"],
    "additionalProperties": False,
}


def test_typed_arguments_pass_unchanged_and_defaults_are_filled() -> None:
    arguments = {"count": 3, "ratio": 0.5, "flag": True, "tags": ["a"], "name": "42"}
    result = validate_arguments("t", SCHEMA, arguments)
    assert result == {**arguments, "mode": "fast"}
    assert validate_arguments("t", SCHEMA, {"count": 1, "ratio": 2})["ratio"] == 2


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("count", "3"),  # a number is not a string...
        ("count", 3.0),  # ...an integer is not a float...
        ("count", True),  # ...and true is not 1
        ("ratio", "0.5"),
        ("flag", "true"),
        ("flag", 1),
        ("tags", '["a"]'),  # JSON text is not an array
        ("filters", '{"city": "x"}'),
        ("name", 42),  # and 42 is not a string
    ],
)
def test_strict_no_coercion_of_tool_arguments(field: str, value: Any) -> None:
    arguments = {"count": 1, field: value}
    with pytest.raises(InvalidArguments, match=f"argument '{field}'"):
        validate_arguments("t", SCHEMA, arguments)


def _nested(depth: int) -> list[Any]:
    value: list[Any] = []
    for _ in range(depth - 1):
        value = [value]
    return value


@pytest.mark.parametrize(
    ("value", "reason"),
    [
        (float("nan"), "nan"),
        (float("inf"), "inf"),
        ("\ud800", "lone surrogate"),
        (2**63, "int64"),
        (_nested(64), "deeper"),
    ],
)
def test_strict_arguments_must_be_strict_json_values(value: Any, reason: str) -> None:
    with pytest.raises(InvalidArguments, match=reason):
        validate_arguments("t", {"type": "object"}, {"x": value})


def test_missing_required_is_named() -> None:
    with pytest.raises(InvalidArguments, match="'count' is a required property"):
        validate_arguments("t", SCHEMA, {})


def test_error_names_the_nested_field_path() -> None:
    with pytest.raises(InvalidArguments, match=r"argument 'filters\.city'"):
        validate_arguments("t", SCHEMA, {"count": 1, "filters": {"city": 5}})


def test_uncoercible_value_is_rejected() -> None:
    with pytest.raises(InvalidArguments, match="argument 'count'"):
        validate_arguments("t", SCHEMA, {"count": "three"})


def test_unknown_argument_rejected_when_schema_forbids() -> None:
    with pytest.raises(InvalidArguments, match="Additional properties"):
        validate_arguments("t", SCHEMA, {"count": 1, "extra": 1})


def test_arguments_must_be_an_object() -> None:
    with pytest.raises(InvalidArguments, match="must be an object"):
        validate_arguments("t", SCHEMA, ["count", 1])


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("kv", "kv"),
        ("KV", "kv"),
        ("read-file", "read_file"),
        ("\uff4b\uff56", "kv"),
        ("read_file ", None),
        ("read_file\u200b", None),
        ("../read_file", None),
        ("ns/read_file", None),
        (42, None),
    ],
)
def test_GW_02_canonical_names(raw: Any, expected: str | None) -> None:
    assert canonical_name(raw) == expected
