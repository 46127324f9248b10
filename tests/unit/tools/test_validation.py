"""Argument validation: no coercion, strict JSON values, defaults, errors naming the field."""

from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sandgate.config import load_config
from sandgate.errors import ConfigError, InvalidArguments, ToolFailed
from sandgate.tools.names import canonical_name
from sandgate.tools.validation import _StrictValidator, _validators, validate_arguments

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


# -- the compiled validator only ever accepts what the reference accepts ----------------------

#: Schemas spanning the keywords tools use; each is judged by both validators below.
DIFFERENTIAL_SCHEMAS: list[dict[str, Any]] = [
    SCHEMA,
    {
        "type": "object",
        "properties": {
            "n": {"type": "integer", "minimum": -5, "maximum": 5, "multipleOf": 2},
            "m": {"type": "number", "multipleOf": 0.1, "minimum": 0.5},
            "k": {"type": "integer", "multipleOf": 0.7},
            "x": {"type": ["number", "null"], "exclusiveMaximum": 10},
            "s": {"type": "string", "minLength": 2, "maxLength": 4, "enum": ["ab", "abc", "é€"]},
            "a": {
                "type": "array",
                "items": {"type": "integer"},
                "maxItems": 2,
                "uniqueItems": True,
            },
            "o": {"type": "object", "required": ["k"], "additionalProperties": {"type": "boolean"}},
            "c": {"const": [1, {"a": None}]},
            "any": {"anyOf": [{"type": "string"}, {"type": "integer"}]},
            "one": {"oneOf": [{"type": "integer"}, {"type": "number", "minimum": 0}]},
            "not": {"not": {"type": "boolean"}},
            "ref": {"$ref": "#/$defs/point"},
        },
        "$defs": {"point": {"type": "object", "properties": {"x": {"type": "number"}}}},
        "dependentRequired": {"n": ["s"]},
        "minProperties": 1,
        "unevaluatedProperties": False,
    },
    {"type": "object", "propertyNames": {"maxLength": 3}, "maxProperties": 2},
]

json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**63), 2**63 - 1)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.sampled_from([0.0, 2.0, -4.0, 3.0])  # integral floats: integers to JSON Schema
    | st.sampled_from([0.3, 0.7, 19.99, 21, 42, 2**53 + 1])  # multiples of 0.1 or 0.7, or not
    | st.text(max_size=5)
    | st.sampled_from(["ab", "abc", "é€", "k"]),
    lambda children: (
        st.lists(children, max_size=3)
        | st.dictionaries(st.sampled_from(["k", "x", "a", "n", "zz"]), children, max_size=3)
    ),
    max_leaves=8,
)
arguments_for_differential = st.dictionaries(
    st.sampled_from(
        [*SCHEMA["properties"], "n", "m", "k", "x", "s", "a", "o", "c", "any", "one", "not", "ref"]
    ),
    json_values,
    max_size=4,
)


def _reference_accepts(schema: dict[str, Any], arguments: dict[str, Any]) -> bool:
    checked = dict(arguments)
    for name, prop in schema.get("properties", {}).items():
        if name not in checked and "default" in prop:
            checked[name] = prop["default"]
    return bool(_StrictValidator(schema).is_valid(checked))


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(schema=st.sampled_from(DIFFERENTIAL_SCHEMAS), arguments=arguments_for_differential)
def test_compiled_validator_accepts_exactly_what_the_reference_accepts(
    schema: dict[str, Any], arguments: dict[str, Any]
) -> None:
    try:
        validate_arguments("t", schema, arguments)
        accepted = True
    except InvalidArguments:
        accepted = False
    assert accepted == _reference_accepts(schema, arguments)


def test_compiled_validator_judges_the_common_case() -> None:
    # Without it the event loop pays ~25 µs of Python per call (docs/benchmarks.md).
    assert _validators("t", SCHEMA).fast is not None
    assert _validators("t", SCHEMA).fast.is_valid({"count": 1})  # type: ignore[union-attr]


@pytest.mark.parametrize(
    "schema",
    [
        {"type": "object", "properties": {"id": {"type": "string", "pattern": "^[a-z]+$"}}},
        {"type": "object", "patternProperties": {"^x": {"type": "integer"}}},
        {"type": "object", "properties": {"p": {"$ref": "http://127.0.0.1:9/remote.json"}}},
        {"type": "object", "properties": {"p": {"type": "number", "multipleOf": 0.1}}},
    ],
)
def test_the_reference_alone_judges_what_the_compiled_validator_could_judge_otherwise(
    schema: dict[str, Any],
) -> None:
    assert _validators("t", schema).fast is None


def test_a_pattern_is_checked_by_the_reference() -> None:
    schema = {"type": "object", "properties": {"id": {"type": "string", "pattern": "^[a-z]+$"}}}
    assert validate_arguments("t", schema, {"id": "abc"}) == {"id": "abc"}
    with pytest.raises(InvalidArguments, match="argument 'id'"):
        validate_arguments("t", schema, {"id": "ABC"})


def test_an_integral_float_is_a_number_but_never_an_integer() -> None:
    schema = {"type": "object", "properties": {"r": {"type": "number"}, "i": {"type": "integer"}}}
    assert validate_arguments("t", schema, {"r": 3.0}) == {"r": 3.0}
    with pytest.raises(InvalidArguments, match="argument 'i'"):
        validate_arguments("t", schema, {"i": 3.0})


def test_a_fractional_multiple_is_checked_by_the_reference() -> None:
    # Floating-point division: 0.3 / 0.1 is 2.9999999999999996, so 0.3 is no multiple of 0.1
    # to the reference; the compiled validator would accept it, as it would 21 for 0.7.
    schema = {
        "type": "object",
        "properties": {"r": {"multipleOf": 0.1}, "i": {"type": "integer", "multipleOf": 0.7}},
    }
    with pytest.raises(InvalidArguments, match="argument 'r'"):
        validate_arguments("t", schema, {"r": 0.3})
    with pytest.raises(InvalidArguments, match="argument 'i'"):
        validate_arguments("t", schema, {"i": 21})
    assert validate_arguments("t", schema, {"i": 7}) == {"i": 7}


_BIG = [2**53, 2**53 + 1, 2**62, 2**63 - 1, -(2**63), 10**18 + 1]
_NUMERIC_SCHEMAS: list[dict[str, Any]] = [
    *({"multipleOf": d} for d in (0.1, 0.25, 0.3, 0.7, 1.5, 2, 3, 2.0)),
    *(
        {keyword: bound}
        for keyword in ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum")
        for big in _BIG
        for bound in (big, float(big))
    ),
]


@pytest.mark.parametrize("keyword_schema", _NUMERIC_SCHEMAS, ids=str)
def test_numeric_keywords_judge_integers_as_the_reference_does(
    keyword_schema: dict[str, Any],
) -> None:
    # Integers reach the compiled validator (floats never do): over a grid of small and
    # extreme ones, each verdict is the reference's.
    schema = {"type": "object", "properties": {"v": keyword_schema}}
    for value in [*range(-50, 200), *_BIG]:
        try:
            validate_arguments("t", schema, {"v": value})
            accepted = True
        except InvalidArguments:
            accepted = False
        assert accepted == _reference_accepts(schema, {"v": value}), (keyword_schema, value)


@pytest.mark.parametrize(
    ("schema", "problem"),
    [
        ({"type": "object", "properties": {"p": {"type": "no-such-type"}}}, "no-such-type"),
        ({"type": "object", "properties": {"p": {"minLength": -1}}}, "minLength"),
        ({"type": "object", "required": "p"}, "required"),
    ],
)
def test_a_tool_whose_schema_is_no_json_schema_fails_clearly_not_as_a_500(
    schema: dict[str, Any], problem: str
) -> None:
    # A tool from an MCP server brings its own schema: a broken one is the tool's failure,
    # named, whatever the arguments.
    with pytest.raises(ToolFailed, match=f"t: its parameter schema is not usable: .*{problem}"):
        validate_arguments("t", schema, {})


def test_a_tool_schema_whose_ref_resolves_nowhere_fails_clearly() -> None:
    schema = {"type": "object", "properties": {"p": {"$ref": "#/$defs/missing"}}}
    with pytest.raises(ToolFailed, match="a \\$ref it holds does not resolve"):
        validate_arguments("t", schema, {"p": 1})


def test_a_configured_tool_whose_schema_is_no_json_schema_is_refused_at_load(
    tmp_path: Path,
) -> None:
    path = tmp_path / "sandgate.yaml"
    path.write_text(
        "tools:\n"
        "  - name: w\n"
        "    kind: exec\n"
        "    command: [/bin/true]\n"
        "    parameters: {type: object, properties: {n: {type: integr}}}\n"
    )
    with pytest.raises(ConfigError, match=r"parameters is not a JSON Schema .*integr"):
        load_config(path, environ={"SANDGATE_HOME": str(tmp_path)})
