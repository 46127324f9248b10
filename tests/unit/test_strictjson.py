"""``sandgate.strictjson``: what every edge's JSON decoder accepts and refuses, and its cost."""

from __future__ import annotations

import json
import math
import random
from typing import Any

import pytest

from sandgate.strictjson import (
    MAX_DEPTH,
    MAX_INT,
    MIN_INT,
    StrictJsonError,
    check_value,
    loads,
    loads_object,
)


def _nested(depth: int, inner: bytes = b"") -> bytes:
    return b"[" * depth + inner + b"]" * depth


@pytest.mark.parametrize(
    "document",
    [
        b'{"a": 1, "a": 2}',
        b'{"a": 1, "a": 1}',  # equal values are still two readings of one key
        b'{"x": {"a": 1, "b": 2, "a": 3}}',
        b'[{"k": [], "k": []}]',
        b'{"a": {"b": [{"c": 1, "c": 2}]}}',
        b'{"\\u0061": 1, "a": 2}',  # one key, two spellings
        '{"é": 1, "e\\u0301": 2, "é": 3}'.encode(),
    ],
)
def test_strict_duplicate_keys_refused_at_any_depth(document: bytes) -> None:
    with pytest.raises(StrictJsonError, match="duplicate key"):
        loads(document)


def test_strict_distinct_keys_that_normalise_alike_are_distinct() -> None:
    """No Unicode normalisation: NFC and NFD spellings are two keys, as for every parser."""
    assert loads('{"é": 1, "e\\u0301": 2}'.encode()) == {"é": 1, "e\u0301": 2}


@pytest.mark.parametrize(
    "document",
    [
        b'"\\ud800"',
        b'"\\udfff"',
        b'"x\\ud83dy"',  # high surrogate without its low half
        b'"\\ude00\\ud83d"',  # the halves in the wrong order
        b'{"\\ud800": 1}',
        b'{"a": ["ok", "\\uDC80"]}',
        '"\ud800"',  # a str holding a raw surrogate
    ],
)
def test_strict_lone_surrogate_refused(document: bytes | str) -> None:
    with pytest.raises(StrictJsonError, match="lone surrogate"):
        loads(document)


def test_strict_surrogate_pairs_and_escaped_backslashes_are_fine() -> None:
    assert loads(b'"\\ud83d\\ude00"') == "\U0001f600"
    assert loads(b'"\\\\ud800"') == "\\ud800"  # an escaped backslash, then text
    assert loads(b'["\\ud800"]', allow_surrogates=True) == ["\ud800"]


@pytest.mark.parametrize(
    "document",
    [
        b'"\xff"',
        b'"\xc0\xae"',  # overlong "."
        b'"\xe0\x80\xaf"',  # overlong "/"
        b'"\xed\xa0\x80"',  # a surrogate encoded in UTF-8
        b'"\xf4\x90\x80\x80"',  # beyond U+10FFFF
        b'"\xe2\x82"',  # truncated sequence
        "{}".encode("utf-16"),
        b"\xef\xbb\xbf{}",  # a byte-order mark
    ],
)
def test_strict_invalid_utf8_refused(document: bytes) -> None:
    with pytest.raises(StrictJsonError, match="UTF-8"):
        loads(document)


@pytest.mark.parametrize(
    "document", [b"NaN", b"[Infinity]", b'{"a": -Infinity}', b"1e400", b"-1e400", b"[1E999]"]
)
def test_strict_nan_and_infinity_refused(document: bytes) -> None:
    with pytest.raises(StrictJsonError):
        loads(document)


def test_strict_depth_cap_is_exact_and_never_a_recursion_error() -> None:
    assert loads(_nested(MAX_DEPTH)) is not None
    for depth in (MAX_DEPTH + 1, 1000, 100_000):
        with pytest.raises(StrictJsonError, match=f"deeper than {MAX_DEPTH}"):
            loads(_nested(depth))
    objects = b'{"a": ' * (MAX_DEPTH + 1) + b"1" + b"}" * (MAX_DEPTH + 1)
    with pytest.raises(StrictJsonError, match="deeper"):
        loads(objects)
    # Brackets inside strings are text, not nesting.
    assert loads(b'{"a": "' + b"[" * 500 + b'"}') == {"a": "[" * 500}
    # Nor are brackets after escaped quotes and backslashes inside strings.
    strings = b",".join([b'"]]]\\""'] * 70)
    tricky = b'{"a": "\\"' + b"[" * 100 + b'\\\\", "b": [' + strings + b"]}"
    assert loads(tricky)["a"].startswith('"[')
    # Many shallow containers are not deep.
    assert len(loads(b"[" + b",".join([b"[[1]]"] * 5000) + b"]")) == 5000


@pytest.mark.parametrize(
    "document",
    [
        str(MAX_INT + 1).encode(),
        str(MIN_INT - 1).encode(),
        b"1" + b"0" * 5000,  # beyond CPython's int-string limit: a ValueError, not a 400
        b"-" + b"9" * 100_000,
        b'{"n": 100000000000000000000}',
    ],
)
def test_strict_integer_cap_refused(document: bytes) -> None:
    with pytest.raises(StrictJsonError, match="int64"):
        loads(document)


def test_strict_integer_bounds_are_inclusive() -> None:
    assert loads(str(MAX_INT).encode()) == MAX_INT
    assert loads(str(MIN_INT).encode()) == MIN_INT
    assert loads(b"-0") == 0


@pytest.mark.parametrize(
    "document", [b"", b"{", b'{"a": 1} x', b"{'a': 1}", b'{"a": 1,}', b"01", b'"\x01"', b"[1,]"]
)
def test_strict_malformed_json_is_one_error(document: bytes) -> None:
    with pytest.raises(StrictJsonError) as raised:
        loads(document)
    assert raised.value.syntax
    assert raised.value.describe("the body").startswith("the body is not valid JSON: ")


@pytest.mark.parametrize(
    "document",
    [
        "",
        "   ",
        " \n\t{",
        '{"a": 1} x',
        '{"a": 1}\n\n  ]',
        "[1, 2]]",
        "{'a': 1}",
        '{"a": 1,}',
        "01",
        '"\x01"',
        "[1,\n]",
        '\n\n  {"a":\n tru}',
        '{"a" 1}',
        '"unterminated',
        '"bad escape \\x"',
        "-",
    ],
)
def test_strict_syntax_errors_are_worded_as_json_words_them(document: str) -> None:
    """The scanner is driven without ``json.JSONDecoder`` (the guest's start never imports
    ``json``); what a client reads about a syntax error must not change with that."""
    with pytest.raises(json.JSONDecodeError) as expected:
        json.loads(document)
    with pytest.raises(StrictJsonError) as raised:
        loads(document)
    assert raised.value.syntax
    assert str(raised.value) == str(expected.value)


def test_strict_rule_breaks_are_told_from_syntax_errors() -> None:
    with pytest.raises(StrictJsonError) as raised:
        loads(b'{"a": 1, "a": 2}')
    assert not raised.value.syntax
    assert raised.value.describe("the body") == (
        'the body is not strict JSON: duplicate key "a" in one object'
    )


def test_strict_error_carries_the_stable_code() -> None:
    with pytest.raises(StrictJsonError) as raised:
        loads(b'{"a": 1, "a": 2}')
    assert raised.value.code == "invalid_json"
    assert isinstance(raised.value, ValueError)


def test_strict_loads_object_needs_an_object() -> None:
    assert loads_object(b'{"a": [1, 2.5, true, null, "x"]}') == {"a": [1, 2.5, True, None, "x"]}
    for document in (b"[]", b"1", b'"x"', b"null"):
        with pytest.raises(StrictJsonError, match="object"):
            loads_object(document)


@pytest.mark.parametrize(
    ("value", "reason"),
    [
        ({1: "a"}, "not a string"),
        ({"a": math.nan}, "nan"),
        ([math.inf], "inf"),
        ({"a": [2**63]}, "int64"),
        ({"a": "\udcff"}, "lone surrogate"),
        ({"\ud800": 1}, "lone surrogate"),
        ({"a": b"bytes"}, "bytes"),
        ({"a": {1, 2}}, "set"),
        ({"a": object()}, "object"),
    ],
)
def test_strict_check_value_refuses_what_loads_could_not_return(value: Any, reason: str) -> None:
    with pytest.raises(StrictJsonError, match=reason):
        check_value(value)


def test_strict_check_value_names_the_place_and_accepts_json_data() -> None:
    check_value({"a": [1, 2.5, True, None, "x", {"b": []}], "t": (1, 2)})
    with pytest.raises(StrictJsonError, match=r"\$\.filters\[1\]\.city"):
        check_value({"filters": [{}, {"city": math.nan}]})
    deep: Any = 1
    for _ in range(MAX_DEPTH + 1):
        deep = [deep]
    with pytest.raises(StrictJsonError, match="deeper"):
        check_value(deep)


def test_strict_common_documents_decode_like_json() -> None:
    documents = [
        b'{"templateID": "base", "timeout": 300, "metadata": {"a": "b"}, "secure": true}',
        b'{"process": {"cmd": "/bin/bash", "args": ["-l", "-c", "echo hi"]}, "stdin": false}',
        b'{"tool": "kv", "arguments": {"op": "set", "key": "k", "value": {"n": [1.5, -2e3]}}}',
        '{"path": "/home/user/caf\u00e9 \U0001f600"}'.encode(),
    ]
    for document in documents:
        assert loads(document) == json.loads(document)


@pytest.mark.parametrize("seed", range(40))
def test_strict_depth_measure_agrees_with_a_walk(seed: int) -> None:
    """Random documents around the cap, with strings full of brackets, quotes and escapes:
    the C-speed depth measure must give the walk's answer."""
    rng = random.Random(seed)
    alphabet = '[]{}"\\ab\u00e9'

    def value(depth: int) -> Any:
        roll = rng.random()
        if depth >= 70 or roll < 0.3:
            return "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 8)))
        if roll < 0.65:
            return [value(depth + 1) for _ in range(rng.randint(0, 3))]
        return {f"k{i}{rng.choice(alphabet)}": value(depth + 1) for i in range(rng.randint(0, 3))}

    def depth_of(node: Any) -> int:
        children = node.values() if isinstance(node, dict) else node
        if isinstance(node, dict | list):
            return 1 + max((depth_of(child) for child in children), default=0)
        return 0

    document = value(rng.randint(0, 10))
    for _ in range(rng.randint(55, 68)):
        document = [document, "]]]"] if rng.random() < 0.5 else {"x": document}
    text = json.dumps(document, ensure_ascii=rng.random() < 0.5).encode()
    if depth_of(document) > MAX_DEPTH:
        with pytest.raises(StrictJsonError, match="deeper"):
            loads(text)
    else:
        assert loads(text) == document
