"""E2B ``network.rules``: parsing (what an API caller may ask for), matching (E2B's exact >
longest wildcard rule) and header rendering with team secrets and workload identity tokens,
alone and inside ``SandboxSecrets`` (the proxy's one view of a sandbox's secrets)."""

from __future__ import annotations

from pathlib import Path

import jwt
import pytest

from sandgate.egress.placeholders import SandboxSecrets, SecretUnavailable
from sandgate.egress.transforms import HeaderTransforms, parse_rules, secret_names
from sandgate.errors import InvalidRequest
from sandgate.identity import Issuer

VALUES = {"oai": "sk-OAI-value", "gh": "ghp-value"}


def _resolve(name: str) -> str:
    try:
        return VALUES[name]
    except KeyError:
        raise SecretUnavailable(f"secret '{name}' is gone") from None


def _rule(**headers: str) -> list[dict[str, object]]:
    return [{"transform": {"headers": headers}}]


def test_parse_rules_canonicalises_hosts_and_secret_names() -> None:
    parsed = parse_rules(
        {
            "API.Example.COM.": _rule(Authorization="Bearer ${e2b.secrets.OAI}"),
            "*.GitHub.com": _rule(**{"X-Token": "${e2b.secrets.gh}-${e2b.secrets.gh}"}),
            "plain.test": [{}],
        }
    )
    assert parsed == {
        "api.example.com": _rule(Authorization="Bearer ${e2b.secrets.oai}"),
        "*.github.com": _rule(**{"X-Token": "${e2b.secrets.gh}-${e2b.secrets.gh}"}),
        "plain.test": [{}],
    }
    assert secret_names(parsed) == {"oai", "gh"}


@pytest.mark.parametrize(
    ("rules", "says"),
    [
        ([], "object"),
        ({"*": _rule(A="b")}, "host name"),
        ({"10.0.0.1": _rule(A="b")}, "host name"),
        ({"[::1]": _rule(A="b")}, "host name"),
        ({"a.test/x": _rule(A="b")}, "host name"),
        ({"a.test": _rule(A="b"), "A.TEST": _rule(A="c")}, "same host"),
        ({"a.test": {"transform": {}}}, "list"),
        ({"a.test": [{"transform": {"headers": {}}, "x": 1}]}, "only 'transform'"),
        ({"a.test": [{"transform": {"body": "x"}}]}, "only 'headers'"),
        ({"a.test": _rule(Host="x")}, "cannot be set"),
        ({"a.test": _rule(**{"Proxy-Authorization": "x"})}, "cannot be set"),
        ({"a.test": _rule(**{"Proxy-Foo": "x"})}, "cannot be set"),
        ({"a.test": _rule(**{"Bad Name": "x"})}, "header name"),
        ({"a.test": _rule(A="x\r\nB: y")}, "line breaks"),
        ({"a.test": _rule(A="x\x01y")}, "control characters"),
        ({"a.test": _rule(A="${e2b.identity.tokens.}")}, "without a token name"),
        ({"a.test": _rule(A="${e2b.identity.aws}")}, "does not know"),
        ({"a.test": _rule(A="${e2b.other}")}, "does not know"),
        ({"a.test": _rule(A="${e2b.secrets.sec_x}")}, "reserved"),
        ({"a.test": _rule(A="${e2b.secrets.}")}, "not usable"),
        ({"a.test": [{"transform": {"headers": {"A": "1", "a": "2"}}}]}, "twice"),
        ({"a.test": [{"transform": {"headers": {"A": 1}}}]}, "string"),
    ],
)
def test_parse_rules_refuses_what_could_misroute_a_secret(rules: object, says: str) -> None:
    with pytest.raises(InvalidRequest) as caught:
        parse_rules(rules)
    assert says in caught.value.message


def test_exact_host_wins_then_the_longest_wildcard_and_never_the_apex() -> None:
    transforms = HeaderTransforms(
        parse_rules(
            {
                "*.example.com": _rule(**{"X-Which": "wide"}),
                "*.api.example.com": _rule(**{"X-Which": "narrow"}),
                "v1.api.example.com": _rule(**{"X-Which": "exact"}),
            }
        ),
        _resolve,
        [443],
    )

    def which(host: str) -> bytes | None:
        headers, _ = transforms.apply([], host, 443)
        return dict(headers).get(b"X-Which")

    assert which("v1.api.example.com") == b"exact"
    assert which("v2.api.example.com") == b"narrow"
    assert which("deep.v2.api.example.com") == b"narrow"
    assert which("www.example.com") == b"wide"
    assert which("example.com") is None  # a wildcard never matches its apex
    assert which("notexample.com") is None
    assert not transforms.intercepts("www.example.com", 80)  # HTTPS ports only
    assert transforms.intercepts("www.example.com", 443)


def test_apply_replaces_same_name_headers_and_reports_secrets_used() -> None:
    transforms = HeaderTransforms(
        parse_rules(
            {
                "api.test": [
                    {"transform": {"headers": {"Authorization": "Bearer ${e2b.secrets.oai}"}}},
                    {"transform": {"headers": {"X-Static": "yes"}}},
                ]
            }
        ),
        _resolve,
        [443],
    )
    headers, used = transforms.apply(
        [(b"authorization", b"mine"), (b"AUTHORIZATION", b"again"), (b"Accept", b"*/*")],
        "api.test",
        443,
    )
    assert headers == [
        (b"Accept", b"*/*"),
        (b"Authorization", b"Bearer sk-OAI-value"),
        (b"X-Static", b"yes"),
    ]
    assert used == ["oai"]
    assert transforms.apply([(b"A", b"b")], "other.test", 443) == ([(b"A", b"b")], [])
    assert transforms.values() == [b"sk-OAI-value"]


def test_a_missing_secret_fails_the_request_and_is_skipped_for_scrubbing() -> None:
    transforms = HeaderTransforms(
        parse_rules({"api.test": _rule(A="${e2b.secrets.gone}", B="${e2b.secrets.gh}")}),
        _resolve,
        [443],
    )
    with pytest.raises(SecretUnavailable, match="gone"):
        transforms.apply([], "api.test", 443)
    assert transforms.values() == [b"ghp-value"]


def test_sandbox_secrets_carry_rules_next_to_placeholders() -> None:
    transforms = HeaderTransforms(
        parse_rules({"api.test": _rule(Authorization="Bearer ${e2b.secrets.oai}")}),
        _resolve,
        [443],
    )
    secrets = SandboxSecrets((), None, transforms)
    assert secrets and secrets.env == {} and secrets.names == ["oai"]
    assert secrets.intercepts("api.test", 443) and not secrets.intercepts("other.test", 443)
    headers, used = secrets.substitute([(b"Authorization", b"x")], "api.test", 443)
    assert (headers, used) == ([(b"Authorization", b"Bearer sk-OAI-value")], ["oai"])
    scrubber = secrets.scrubber()
    assert scrubber.scrub(b"echo sk-OAI-value") == b"echo " + b"*" * len("sk-OAI-value")
    assert not SandboxSecrets((), None, None)


def _identity_transforms(
    tmp_path: Path, rules: dict[str, object]
) -> tuple[HeaderTransforms, Issuer]:
    issuer = Issuer("https://api.test", "test", tmp_path)
    tokens = issuer.for_sandbox("sbx1", "team", {"aws": "sts.amazonaws.com"})
    return HeaderTransforms(parse_rules(rules), _resolve, [443], identity=tokens), issuer


def test_identity_placeholders_become_tokens_for_their_registered_audience(
    tmp_path: Path,
) -> None:
    rules = {
        "api.test": _rule(
            Authorization="Bearer ${e2b.identity.tokens.aws}", **{"X-Key": "${e2b.secrets.oai}"}
        )
    }
    transforms, issuer = _identity_transforms(tmp_path, rules)
    assert transforms.token_names == ["${e2b.identity.tokens.aws}"]
    headers, used = transforms.apply([], "api.test", 443)
    token = dict(headers)[b"Authorization"].removeprefix(b"Bearer ").decode()
    claims = jwt.decode(
        token,
        jwt.PyJWKSet.from_dict(issuer.jwks()).keys[0],
        algorithms=["ES256"],
        audience="sts.amazonaws.com",
    )
    assert claims["sub"] == "spiffe://test/team/team/sandbox/sbx1"
    assert used == ["${e2b.identity.tokens.aws}", "oai"]
    assert sorted(transforms.values()) == sorted([b"sk-OAI-value", token.encode()])
    secrets = SandboxSecrets((), None, transforms)
    assert secrets.names == ["oai", "${e2b.identity.tokens.aws}"]
    assert secrets.scrubber().scrub(token.encode() + b"!") == b"*" * len(token) + b"!"
    # Never in the clear or to another host.
    assert transforms.apply([], "api.test", 80) == ([], [])
    assert transforms.apply([], "other.test", 443) == ([], [])


def test_an_unregistered_token_fails_the_request_and_values_are_not_placeholders(
    tmp_path: Path,
) -> None:
    transforms, _ = _identity_transforms(
        tmp_path, {"api.test": _rule(A="${e2b.identity.tokens.gcp}")}
    )
    with pytest.raises(SecretUnavailable, match="'gcp' is not registered"):
        transforms.apply([], "api.test", 443)
    without = HeaderTransforms(
        parse_rules({"api.test": _rule(A="${e2b.identity.tokens.aws}")}), _resolve, [443]
    )
    with pytest.raises(SecretUnavailable, match="not registered"):
        without.apply([], "api.test", 443)
    # A secret whose value looks like a placeholder is sent as it is, not minted.
    VALUES["tricky"] = "${e2b.identity.tokens.aws}"
    try:
        tricky, _ = _identity_transforms(tmp_path, {"api.test": _rule(A="${e2b.secrets.tricky}")})
        assert tricky.apply([], "api.test", 443) == (
            [(b"A", b"${e2b.identity.tokens.aws}")],
            ["tricky"],
        )
    finally:
        del VALUES["tricky"]
