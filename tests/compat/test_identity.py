"""Workload identity (E2B's ``iam``, issue 13) through the pinned SDKs that have it (Python
2.63, JS 2.51; the 2.31 pins predate it), each on one runtime (contract:
shared/e2b-protocol.md §2.3; docs/compatibility.md).

The SDK registers a token with ``Secret.iam_token``/``Secret.iamToken`` and builds the rule
with a ``transform`` callable; the test's HTTPS echo server on ``bound.test`` receives the
token, which must verify against the JWKS the server publishes.
"""

from __future__ import annotations

import json
from collections.abc import Callable

import httpx
import jwt
import pytest

from tests.fixtures.server import RunningServer
from tests.fixtures.tls_upstream import TlsUpstream, tls_upstream

from .clients import PreparedClient
from .expect import assert_sdk_version, failed_with

__all__ = ["tls_upstream"]

pytestmark = [pytest.mark.compat, pytest.mark.one_runtime_per_client]

AUDIENCE = "sts.compat.test"


@pytest.fixture(scope="module")
def server(
    tls_upstream: TlsUpstream, runtime_server_factory: Callable[..., RunningServer]
) -> RunningServer:
    port = tls_upstream.port
    return runtime_server_factory(
        config={
            "egress": {
                "resolve_overrides": {"bound.test": ["127.0.0.1"]},
                "allow": [{"host": "bound.test", "ports": [port], "addresses": ["127.0.0.1/32"]}],
                "upstream_ca_file": str(tls_upstream.ca_file),
                "transform_ports": [port],
            }
        }
    )


def _verify(server: RunningServer, token: str) -> dict[str, object]:
    issuer = httpx.get(f"{server.url}/.well-known/openid-configuration").json()["issuer"]
    keys = jwt.PyJWKSet.from_dict(httpx.get(f"{server.url}/.well-known/jwks.json").json())
    kid = jwt.get_unverified_header(token)["kid"]
    (key,) = [k for k in keys.keys if k.key_id == kid]
    claims: dict[str, object] = jwt.decode(
        token, key, algorithms=["ES256"], audience=AUDIENCE, issuer=issuer
    )
    return claims


@pytest.mark.parametrize("client", ["py-e2b-2.63.0", "js-e2b-2.51.0"], indirect=True)
def test_iam_tokens(
    client: PreparedClient, server: RunningServer, tls_upstream: TlsUpstream
) -> None:
    port = tls_upstream.port
    tag = client.name.replace(".", "-")
    path, after = f"/headers?iam-{tag}", f"/headers?iam-after-{tag}"
    result = client.run(
        "identity",
        server.env,
        [
            "bound.test",
            AUDIENCE,
            f"https://bound.test:{port}{path}",
            f"https://bound.test:{port}{after}",
        ],
    )
    assert_sdk_version(result, client)
    request = result["request"]
    assert request["exit_code"] == 0, request
    authorization = tls_upstream.seen(path)[-1]["authorization"]
    assert authorization is not None and authorization.startswith("Bearer "), authorization
    token = authorization.removeprefix("Bearer ")
    claims = _verify(server, token)
    assert claims["aud"] == [AUDIENCE]
    assert str(claims["sub"]).startswith("spiffe://sandbox.localhost/team/")
    # The sandbox never holds the token: reflections are masked, the environment lacks it.
    assert token not in request["stdout"]
    assert f"Bearer {'*' * len(token)}" in request["stdout"]
    assert token not in result["env"]
    assert "${e2b.identity.tokens.aws}" in json.dumps(result["info_rules"])
    refused = failed_with(client, result["unregistered"], "Sandbox")
    assert "'gcp'" in refused["message"], refused
    assert result["after"]["exit_code"] == 0, result["after"]
    updated = tls_upstream.seen(after)[-1]["authorization"]
    assert updated is not None and updated.startswith("Token ey"), updated
    assert _verify(server, updated.removeprefix("Token "))["aud"] == [AUDIENCE]
    wrong = failed_with(client, result["wrong_type"], "Sandbox")
    assert "OIDC" in wrong["message"], wrong
    assert token not in server.log_text()
