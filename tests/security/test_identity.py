"""Workload identity (E2B's ``iam``, issue 13) through ``network.rules``: security.md §2.7 (SEC)
on every runtime.

A sandbox registers a token ``aws`` for the audience ``sts.test``; its rules put
``Bearer ${e2b.identity.tokens.aws}`` in ``Authorization`` for ``bound.test``. The test's own
HTTPS echo server (``tls_upstream``) stands in for the relying party: it receives the token,
and the test verifies it with PyJWT against the JWKS the server publishes, as a cloud's STS
would. The sandbox must never hold the token, and reflections of it are masked.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import jwt
import pytest

from tests.fixtures.egress import (
    EgressSandbox,
    audit_records,
    found_inside,
    kill,
    make_sandbox,
    terminating_egress,
)
from tests.fixtures.server import RunningServer
from tests.fixtures.tls_upstream import TlsUpstream, tls_upstream

__all__ = ["tls_upstream"]

AUDIENCE = "sts.test"
REFERENCE = "${e2b.identity.tokens.aws}"


@pytest.fixture(scope="module")
def server(
    tls_upstream: TlsUpstream, runtime_server_factory: Callable[..., RunningServer]
) -> RunningServer:
    names = ("bound.test", "other.test")
    return runtime_server_factory(config={"egress": terminating_egress(tls_upstream, names)})


def _iam(**tokens: str) -> dict[str, Any]:
    return {
        "tokens": {
            name: {"audience": audience, "tokenType": "JWT-SVID"}
            for name, audience in (tokens or {"aws": AUDIENCE}).items()
        }
    }


def _rules(value: str = f"Bearer {REFERENCE}", host: str = "bound.test") -> dict[str, Any]:
    return {host: [{"transform": {"headers": {"Authorization": value}}}]}


@pytest.fixture
def box(server: RunningServer) -> Iterator[EgressSandbox]:
    sandbox = make_sandbox(server, iam=_iam(), network={"rules": _rules()})
    yield sandbox
    kill(sandbox)


def _curl(box: EgressSandbox, url: str, extra: str = "") -> Any:
    return box.shell(f"curl -sS -m 20 -D - {extra} {url}")


def _bearer(tls_upstream: TlsUpstream, path: str) -> str:
    authorization = tls_upstream.seen(path)[-1]["authorization"]
    assert isinstance(authorization, str) and authorization.startswith("Bearer "), authorization
    return authorization.removeprefix("Bearer ")


def _verify(server: RunningServer, token: str) -> dict[str, Any]:
    """What a relying party does: discovery, then the JWKS, then the signature and claims."""
    discovery = httpx.get(f"{server.url}/.well-known/openid-configuration")
    assert discovery.status_code == 200, discovery.text
    config = discovery.json()
    assert config["id_token_signing_alg_values_supported"] == ["ES256"]
    assert config["jwks_uri"] == config["issuer"] + "/.well-known/jwks.json"
    # The issuer names the server's public address; the test reaches it on loopback.
    keys = httpx.get(f"{server.url}/.well-known/jwks.json")
    assert keys.status_code == 200, keys.text
    kid = jwt.get_unverified_header(token)["kid"]
    (key,) = [k for k in jwt.PyJWKSet.from_dict(keys.json()).keys if k.key_id == kid]
    claims: dict[str, Any] = jwt.decode(
        token, key, algorithms=["ES256"], audience=AUDIENCE, issuer=config["issuer"]
    )
    return claims


def test_SEC_04_bound_host_gets_a_verifiable_token_and_reflections_are_masked(
    box: EgressSandbox, tls_upstream: TlsUpstream, server: RunningServer
) -> None:
    port = tls_upstream.port
    result = _curl(box, f"https://bound.test:{port}/headers?a", '-H "Authorization: mine"')
    assert result.exit_code == 0, result.stderr
    token = _bearer(tls_upstream, "/headers?a")
    claims = _verify(server, token)
    assert claims["aud"] == [AUDIENCE]
    assert claims["sub"].startswith("spiffe://sandbox.localhost/team/")
    assert claims["sub"].endswith(f"/sandbox/{box.id}")
    assert claims["exp"] - claims["iat"] == 300
    # Reflected in a header and in the body: masked on the way back.
    assert token not in result.stdout
    masked = "*" * len(token)
    assert f"x-echo-authorization: bearer {masked}" in result.stdout.lower()
    echoed = json.loads(result.stdout.rsplit("\r\n\r\n", 1)[1])["headers"]
    assert [v for k, v in echoed.items() if k.lower() == "authorization"] == [f"Bearer {masked}"]
    (used,) = [r for r in audit_records(server, box.id) if r["event"] == "egress.request"]
    assert (used["reason"], used["secrets"]) == ("secret_substituted", [REFERENCE])
    assert token not in (server.home / "audit" / "audit.jsonl").read_text()
    assert token not in server.log_text()


def test_SEC_02_other_hosts_and_plain_places_never_get_a_token(
    box: EgressSandbox, tls_upstream: TlsUpstream
) -> None:
    port = tls_upstream.port
    ca = base64.b64encode(tls_upstream.ca_pem.encode()).decode()
    setup = box.shell(f"echo {ca} | base64 -d > /tmp/upstream-ca.pem")
    assert setup.exit_code == 0, setup.stderr
    other = _curl(box, f"--cacert /tmp/upstream-ca.pem https://other.test:{port}/headers?b")
    assert other.exit_code == 0, other.stderr
    assert tls_upstream.seen("/headers?b")[-1]["authorization"] is None
    # The placeholder is inert where a rule does not put it: in the URL it stays text.
    plain = _curl(box, f"'https://bound.test:{port}/post?t={REFERENCE}'", "-g -d x=1")
    assert plain.exit_code == 0, plain.stderr
    assert tls_upstream.seen("/post?t=")[-1]["path"] == f"/post?t={REFERENCE}"


def test_SEC_01_the_token_is_nowhere_inside(box: EgressSandbox, tls_upstream: TlsUpstream) -> None:
    used = _curl(box, f"https://bound.test:{tls_upstream.port}/headers?c")
    assert used.exit_code == 0, used.stderr
    token = _bearer(tls_upstream, "/headers?c")
    env = box.shell("env")
    assert env.exit_code == 0 and token not in env.stdout and "e2b.identity" not in env.stdout
    assert found_inside(box, token) == []


def test_bad_registrations_and_unregistered_names_are_refused(server: RunningServer) -> None:
    def create(**body: Any) -> httpx.Response:
        return httpx.post(
            f"{server.url}/v2/sandboxes",
            json={"templateID": "base", **body},
            headers={"X-API-Key": server.api_key},
            timeout=60,
        )

    cases: list[tuple[dict[str, Any], str]] = [
        ({"network": {"rules": _rules()}}, "'aws'"),
        ({"iam": _iam(gcp="x"), "network": {"rules": _rules()}}, "'aws'"),
        (
            {"iam": {"tokens": {"aws": {"audience": AUDIENCE, "tokenType": "OIDC"}}}},
            "'OIDC'",
        ),
        ({"iam": {"tokens": {"a}b": {"audience": "x", "tokenType": "JWT-SVID"}}}}, "a}b"),
        ({"iam": {"tokens": {"aws": {"audience": "", "tokenType": "JWT-SVID"}}}}, "audience"),
        ({"iam": _iam(), "network": {"rules": _rules("${e2b.identity.tokens.}")}}, "name"),
    ]
    for body, says in cases:
        answer = create(**body)
        assert answer.status_code == 400, (body, answer.text)
        assert says in answer.json()["message"], answer.text


def test_update_network_uses_the_registration_which_survives_a_restart(
    server: RunningServer, tls_upstream: TlsUpstream
) -> None:
    port = tls_upstream.port
    sandbox = make_sandbox(server, iam=_iam())
    headers = {"X-API-Key": server.api_key}
    url = f"{server.url}/sandboxes/{sandbox.id}/network"
    try:
        refused = httpx.put(
            url, json={"rules": _rules("${e2b.identity.tokens.gcp}")}, headers=headers
        )
        assert refused.status_code == 400, refused.text
        assert "'gcp'" in refused.json()["message"] and "'aws'" in refused.json()["message"]
        assert httpx.put(url, json={"rules": _rules()}, headers=headers).status_code == 204
        assert _curl(sandbox, f"https://bound.test:{port}/headers?u").exit_code == 0
        first = _bearer(tls_upstream, "/headers?u")
        before = _verify(server, first)
        server.restart(hard=True)
        # Adopted with its rules and registration; the key was kept, so the token minted
        # before the restart still verifies against the JWKS served after it.
        assert _verify(server, first) == before
        assert _curl(sandbox, f"https://bound.test:{port}/headers?v").exit_code == 0
        after = _verify(server, _bearer(tls_upstream, "/headers?v"))
        assert after["sub"] == before["sub"] and after["jti"] != before["jti"]
        again = httpx.put(url, json={"rules": _rules(f"Token {REFERENCE}")}, headers=headers)
        assert again.status_code == 204, again.text
        assert _curl(sandbox, f"https://bound.test:{port}/headers?w").exit_code == 0
        value = tls_upstream.seen("/headers?w")[-1]["authorization"]
        assert value is not None and value.startswith("Token ey"), value
    finally:
        kill(sandbox)
