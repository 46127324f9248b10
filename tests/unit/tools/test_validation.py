"""Argument validation: obvious coercions, defaults, errors that name the field."""

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


def test_coerces_obvious_types_and_fills_defaults() -> None:
    result = validate_arguments(
        "t",
        SCHEMA,
        {"count": "3", "ratio": "0.5", "flag": "true", "tags": '["a"]', "name": 42},
    )
    assert result == {
        "count": 3,
        "ratio": 0.5,
        "flag": True,
        "tags": ["a"],
        "name": "42",
        "mode": "fast",
    }


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
