"""References and ``when:`` conditions: parsed strictly, evaluated without ``eval``."""

from __future__ import annotations

import pytest

from sandgate.workflows.expressions import (
    ExpressionError,
    Scope,
    parse_condition,
    parse_reference,
    parse_template,
)

SCOPE = Scope(
    inputs={"n": 3, "name": "ada", "flag": False, "tags": ["a", "b"]},
    outputs={"fetch": {"items": [{"id": 7}, {"id": 8}], "count": 2, "empty": []}, "skip": None},
    run={"id": "wfr_1", "workflow": "w", "attempt": 1},
    item={"id": 7},
    index=0,
    has_item=True,
)


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("${inputs.n}", 3),
        ("${steps.fetch.output.items[1].id}", 8),
        ("${steps.fetch.output}", {"items": [{"id": 7}, {"id": 8}], "count": 2, "empty": []}),
        ("${item.id}", 7),
        ("${index}", 0),
        ("${run.id}", "wfr_1"),
        ("n=${inputs.n} by ${inputs.name}", "n=3 by ada"),
        ("${inputs.tags}!", '["a","b"]!'),
    ],
)
def test_templates_keep_types_or_interpolate(text: str, value: object) -> None:
    assert parse_template(text).render(SCOPE) == value


def test_templates_render_inside_structures() -> None:
    template = parse_template({"a": ["${inputs.n}", {"b": "x${index}"}], "c": 1})
    assert template.render(SCOPE) == {"a": [3, {"b": "x0"}], "c": 1}
    assert [r.text for r in template.references()] == ["inputs.n", "index"]


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("${secrets.key}", "unknown root 'secrets'"),
        ("${steps.fetch}", "steps.<step id>.output"),
        ("${steps.fetch.result}", "read through .output"),
        ("${inputs.a[x]}", "list index"),
        ("${inputs.}", "a name must follow"),
        ("${inputs.n", "unclosed"),
    ],
)
def test_bad_references_say_what_is_wrong(text: str, message: str) -> None:
    with pytest.raises(ExpressionError, match=message):
        parse_template(text)


def test_missing_values_name_the_path() -> None:
    with pytest.raises(ExpressionError, match=r"steps.fetch.output.items\[1\] has no key 'x'"):
        parse_template("${steps.fetch.output.items[1].x}").render(SCOPE)
    with pytest.raises(ExpressionError, match="has no element \\[5\\]"):
        parse_template("${steps.fetch.output.items[5]}").render(SCOPE)
    with pytest.raises(ExpressionError, match="step 'other' has no output yet"):
        parse_template("${steps.other.output}").render(SCOPE)


@pytest.mark.parametrize(
    ("condition", "expected"),
    [
        ("inputs.n > 2", True),
        ("${inputs.n} >= 3 and inputs.name == 'ada'", True),
        ("inputs.n == 3.0", True),
        ("inputs.n != '3'", True),
        ("not inputs.flag", True),
        ("inputs.flag or steps.fetch.output.count < 2", False),
        ("steps.fetch.output.empty", False),
        ("steps.fetch.output.items", True),
        ("steps.skip.output == null", True),
        ('(inputs.n > 5 or inputs.n < 4) and not (inputs.name == "bob")', True),
        ("inputs.name < 'b'", True),
        ("true and not false", True),
        ("inputs.flag == false", True),
        ("inputs.flag == 0", False),
    ],
)
def test_conditions(condition: str, expected: bool) -> None:
    assert parse_condition(condition).evaluate(SCOPE) is expected


@pytest.mark.parametrize(
    ("condition", "message"),
    [
        ("inputs.n >", "ends too early"),
        ("inputs.n > 2 inputs.n", "unexpected"),
        ("__import__('os')", "unknown root '__import__'"),
        ("inputs.n + 1 > 2", "cannot read"),
        ("(inputs.n > 2", "ends too early"),
        ("(inputs.n > 2 inputs.n", "not closed"),
        ("", "empty condition"),
        ("and inputs.n", "needs an operand"),
    ],
)
def test_bad_conditions_fail_at_parse(condition: str, message: str) -> None:
    with pytest.raises(ExpressionError, match=message):
        parse_condition(condition)


def test_ordering_different_types_is_an_error() -> None:
    with pytest.raises(ExpressionError, match="cannot order a string and a number"):
        parse_condition("inputs.name > 2").evaluate(SCOPE)


def test_a_reference_names_its_step() -> None:
    assert parse_reference("steps.fetch.output.items").step == "fetch"
    assert parse_reference("inputs.n").step is None
