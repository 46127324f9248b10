"""E2B's ``iam`` on create: what a caller may register, checked as the SDKs check names."""

from __future__ import annotations

import pytest

from sandgate.errors import InvalidRequest
from sandgate.identity import identity_names, parse_iam, registered_tokens


def _token(audience: object = "sts.amazonaws.com", token_type: object = "JWT-SVID") -> object:
    return {"audience": audience, "tokenType": token_type}


def test_a_registration_is_kept_as_given() -> None:
    parsed = parse_iam({"tokens": {"AWS.Prod": _token(), "gcp": _token("//iam.googleapis.com")}})
    assert parsed == {
        "tokens": {
            "AWS.Prod": {"audience": "sts.amazonaws.com", "tokenType": "JWT-SVID"},
            "gcp": {"audience": "//iam.googleapis.com", "tokenType": "JWT-SVID"},
        }
    }
    assert registered_tokens({"iam": parsed}) == {
        "AWS.Prod": "sts.amazonaws.com",
        "gcp": "//iam.googleapis.com",
    }
    assert parse_iam(None) is None and parse_iam({"tokens": {}}) is None
    assert registered_tokens(None) == {} and registered_tokens({"rules": {}}) == {}


@pytest.mark.parametrize(
    ("raw", "says"),
    [
        ([], "must be an object"),
        ({"tokens": []}, "mapping names"),
        ({"tokens": {"aws": _token(token_type="JWT")}}, "tokenType 'JWT' is not supported"),
        ({"tokens": {"aws": {"audience": "x"}}}, "tokenType 'missing'"),
        ({"tokens": {"aws": _token(audience="")}}, "audience must be a non-empty string"),
        ({"tokens": {"aws": _token(audience=" ")}}, "audience"),
        ({"tokens": {"aws": _token(audience="x" * 513)}}, "at most 512"),
        ({"tokens": {"aws": _token(audience=3)}}, "audience"),
        ({"tokens": {"aws": "sts"}}, "must be an object with 'audience'"),
        ({"tokens": {"": _token()}}, "not usable"),
        ({"tokens": {"a}b": _token()}}, "not usable"),
        ({"tokens": {"a{b": _token()}}, "not usable"),
        ({"tokens": {"a\x85b": _token()}}, "not usable"),
        ({"tokens": {f"t{i}": _token() for i in range(17)}}, "at most 16"),
    ],
)
def test_bad_registrations_are_refused_naming_the_entry(raw: object, says: str) -> None:
    with pytest.raises(InvalidRequest) as caught:
        parse_iam(raw)
    assert says in caught.value.message


def test_identity_names_lists_each_referenced_token_once_in_order() -> None:
    rules = {
        "a.test": [{"transform": {"headers": {"A": "${e2b.identity.tokens.x}"}}}],
        "b.test": [
            {},
            {"transform": {"headers": {"B": "${e2b.identity.tokens.y}${e2b.identity.tokens.x}"}}},
        ],
    }
    assert identity_names(rules) == ["x", "y"]
