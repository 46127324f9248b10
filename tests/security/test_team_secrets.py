"""Team secrets (E2B's ``/secrets``, issue 13) used through ``network.rules``: security.md §2.7
(SEC) and B8 on every runtime.

A team stores ``CANARY-<random>`` through the API; its sandbox's rules put
``Bearer ${e2b.secrets.<name>}`` in ``Authorization`` for ``bound.test``. Both names map onto
the test's own HTTPS echo server (``tls_upstream``), trusted by the gateway through
``egress.upstream_ca_file``; ``egress.transform_ports`` names the fixture's port as E2B's 443.
"""

from __future__ import annotations

import base64
import json
import secrets
import sqlite3
from collections.abc import Callable, Iterator
from typing import Any

import httpx
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

CANARY = f"CANARY-{secrets.token_hex(12)}"
ROTATED = f"ROTATED-{secrets.token_hex(12)}"


@pytest.fixture(scope="module")
def server(
    tls_upstream: TlsUpstream, runtime_server_factory: Callable[..., RunningServer]
) -> RunningServer:
    names = ("bound.test", "other.test")
    return runtime_server_factory(config={"egress": terminating_egress(tls_upstream, names)})


def _api(server: RunningServer, key: str | None = None) -> httpx.Client:
    return httpx.Client(
        base_url=server.url, headers={"X-API-Key": key or server.api_key}, timeout=60
    )


@pytest.fixture(scope="module")
def secret(server: RunningServer) -> Iterator[dict[str, Any]]:
    with _api(server) as api:
        created = api.post(
            "/secrets", json={"name": "GH-Token", "value": CANARY, "metadata": {"owner": "ci"}}
        )
        assert created.status_code == 201, created.text
        body: dict[str, Any] = created.json()
        yield body
        api.delete(f"/secrets/{body['secretID']}")


def _rules(name: str = "gh-token", host: str = "bound.test") -> dict[str, Any]:
    value = "Bearer ${e2b.secrets." + name + "}"
    return {host: [{"transform": {"headers": {"Authorization": value}}}]}


@pytest.fixture
def box(server: RunningServer, secret: dict[str, Any]) -> Iterator[EgressSandbox]:
    sandbox = make_sandbox(server, network={"rules": _rules()})
    yield sandbox
    kill(sandbox)


def _curl(box: EgressSandbox, url: str, extra: str = "") -> Any:
    return box.shell(f"curl -sS -m 20 -D - {extra} {url}")


def test_SEC_04_rule_puts_the_value_in_the_bound_host_only_and_masks_reflections(
    box: EgressSandbox, tls_upstream: TlsUpstream, server: RunningServer
) -> None:
    port = tls_upstream.port
    # The client sends no credential (and a wrong one is replaced, not appended).
    result = _curl(box, f"https://bound.test:{port}/headers?a", '-H "Authorization: mine"')
    assert result.exit_code == 0, result.stderr
    assert tls_upstream.seen("/headers?a")[-1]["authorization"] == f"Bearer {CANARY}"
    assert CANARY not in result.stdout
    masked = "*" * len(CANARY)
    assert f"x-echo-authorization: bearer {masked}" in result.stdout.lower()
    echoed = json.loads(result.stdout.rsplit("\r\n\r\n", 1)[1])["headers"]
    assert [v for k, v in echoed.items() if k.lower() == "authorization"] == [f"Bearer {masked}"]
    (used,) = [r for r in audit_records(server, box.id) if r["event"] == "egress.request"]
    assert (used["reason"], used["secrets"]) == ("secret_substituted", ["gh-token"])


def test_SEC_02_unbound_host_and_plain_places_never_get_the_value(
    box: EgressSandbox, tls_upstream: TlsUpstream
) -> None:
    port = tls_upstream.port
    ca = base64.b64encode(tls_upstream.ca_pem.encode()).decode()
    setup = box.shell(
        f"echo {ca} | base64 -d > /tmp/upstream-ca.pem && "
        "cat /run/sandgate/ca-certificates.crt /tmp/upstream-ca.pem > /tmp/all-ca.pem"
    )
    assert setup.exit_code == 0, setup.stderr
    other = _curl(
        box, f"--cacert /tmp/upstream-ca.pem https://other.test:{port}/headers?b", "-H 'X-T: 1'"
    )
    assert other.exit_code == 0, other.stderr
    assert tls_upstream.seen("/headers?b")[-1]["authorization"] is None
    # SEC-05: the bound host redirects to the unbound one; the client's follow-up is judged
    # on its own destination.
    chased = _curl(box, f"https://bound.test:{port}/redirect", "-L --cacert /tmp/all-ca.pem")
    assert chased.exit_code == 0, chased.stderr
    assert tls_upstream.seen("/redirect")[-1]["authorization"] == f"Bearer {CANARY}"
    followed = [r for r in tls_upstream.requests if r["host"].startswith("other.test")][-1]
    assert (followed["path"], followed["authorization"]) == ("/headers", None)
    assert CANARY not in chased.stdout
    # The placeholder itself is inert anywhere else: in the URL it reaches the host as text.
    plain = _curl(box, f"'https://bound.test:{port}/post?t=${{e2b.secrets.gh-token}}'", "-g -d x=1")
    assert plain.exit_code == 0, plain.stderr
    assert tls_upstream.seen("/post?t=")[-1]["path"] == "/post?t=${e2b.secrets.gh-token}"


def test_SEC_01_the_value_is_nowhere_inside_nor_in_logs_answers_or_the_store(
    box: EgressSandbox, tls_upstream: TlsUpstream, server: RunningServer, secret: dict[str, Any]
) -> None:
    used = _curl(box, f"https://bound.test:{tls_upstream.port}/headers?c")
    assert used.exit_code == 0, used.stderr
    assert found_inside(box, CANARY) == []
    # The sandbox's own view of its rules holds the placeholder.
    info = httpx.get(f"{server.url}/sandboxes/{box.id}", headers={"X-API-Key": server.api_key})
    assert info.json()["network"]["rules"] == _rules()
    with _api(server) as api:
        answers = [
            api.get(f"/secrets/{secret['secretID']}"),
            api.get("/secrets/gh-token"),
            api.get("/secrets"),
        ]
    for answer in answers:
        assert answer.status_code == 200, answer.text
        assert CANARY not in answer.text and "value" not in answer.text
    assert answers[0].json() == answers[1].json()
    assert answers[0].json()["name"] == "gh-token"  # names are stored in lower case
    assert answers[0].json()["metadata"] == {"owner": "ci"}
    assert CANARY not in (server.home / "audit" / "audit.jsonl").read_text()
    assert CANARY not in server.log_text()
    # Encrypted at rest: the database holds no plaintext, and the key is root's alone.
    with sqlite3.connect(server.home / "sandgate.db") as db:
        stored = db.execute("SELECT ciphertext FROM team_secrets").fetchall()
    assert stored and all(CANARY not in row[0] for row in stored)
    raw = (server.home / "sandgate.db").read_bytes()
    assert CANARY.encode() not in raw
    key = server.home / "secrets" / "team-secrets.key"
    assert key.stat().st_mode & 0o777 == 0o600


def test_rotation_and_deletion_take_effect_on_the_next_request(
    server: RunningServer, tls_upstream: TlsUpstream
) -> None:
    port = tls_upstream.port
    with _api(server) as api:
        made = api.post("/secrets", json={"name": "rotating", "value": "first-value"}).json()
        sandbox = make_sandbox(server, network={"rules": _rules("rotating")})
        try:
            updated = api.post(f"/secrets/{made['secretID']}", json={"value": ROTATED})
            assert updated.status_code == 200, updated.text
            assert updated.json()["currentVersion"] == 2
            assert _curl(sandbox, f"https://bound.test:{port}/headers?r").exit_code == 0
            assert tls_upstream.seen("/headers?r")[-1]["authorization"] == f"Bearer {ROTATED}"
            assert api.delete(f"/secrets/{made['secretID']}").status_code == 204
            after = _curl(sandbox, f"https://bound.test:{port}/headers?gone")
            assert "\r\nHTTP/1.1 502 " in after.stdout, after.stdout  # after the CONNECT's 200
            assert "x-sandgate-reason: secret_unavailable" in after.stdout.lower()
            assert tls_upstream.seen("/headers?gone") == []
        finally:
            kill(sandbox)


def test_rules_name_only_the_teams_own_existing_secrets(
    server: RunningServer, secret: dict[str, Any]
) -> None:
    other = json.loads(
        server.cli("keys", "create", "--team", "secret-other", "--name", "o", "--json").stdout
    )["key"]
    with _api(server, other) as api:
        assert api.get(f"/secrets/{secret['secretID']}").status_code == 404
        assert api.get("/secrets/gh-token").status_code == 404
        assert api.get("/secrets").json() == []
        assert api.delete(f"/secrets/{secret['secretID']}").status_code == 404
        foreign = api.post(
            "/v2/sandboxes", json={"templateID": "base", "network": {"rules": _rules()}}
        )
        assert foreign.status_code == 400, foreign.text
        assert "gh-token" in foreign.json()["message"]
    with _api(server) as api:
        for rules in (
            _rules("missing"),
            {"*": [{"transform": {"headers": {"X-A": "v"}}}]},
            {"10.0.0.1": [{"transform": {"headers": {"X-A": "v"}}}]},
            {"bound.test": [{"transform": {"headers": {"Content-Length": "1"}}}]},
            {"bound.test": [{"transform": {"headers": {"X-A": "${e2b.identity.tokens.aws}"}}}]},
            {"bound.test": [{"transform": {"headers": {"X-A": "a\r\nB: c"}}}]},
            {"bound.test": [{"transform": {"body": {}}}]},
        ):
            answer = api.post(
                "/v2/sandboxes", json={"templateID": "base", "network": {"rules": rules}}
            )
            assert answer.status_code == 400, (rules, answer.text)


def test_secret_api_refuses_bad_input_clearly(server: RunningServer) -> None:
    with _api(server) as api:
        for body in (
            {"name": "a{b}", "value": "v"},
            {"name": "", "value": "v"},
            {"name": "sec_reserved", "value": "v"},
            {"name": "ok", "value": "line\nbreak"},
            {"name": "ok", "value": ""},
            {"name": "ok", "value": "v", "metadata": {f"k{i}": "v" for i in range(33)}},
            {"name": "ok", "value": 5},
        ):
            answer = api.post("/secrets", json=body)
            assert answer.status_code == 400, (body, answer.text)
            assert answer.json()["code"] == 400
        made = api.post("/secrets", json={"name": "twice", "value": "v"})
        assert made.status_code == 201
        try:
            assert api.post("/secrets", json={"name": "TWICE", "value": "w"}).status_code == 409
        finally:
            api.delete("/secrets/twice")
        assert api.get("/secrets/nope").status_code == 404
        assert api.post("/secrets/nope", json={"value": "v"}).status_code == 404
        assert api.delete("/secrets/nope").status_code == 404


def test_update_network_adds_a_rule_to_a_running_sandbox(
    server: RunningServer, tls_upstream: TlsUpstream, secret: dict[str, Any]
) -> None:
    port = tls_upstream.port
    sandbox = make_sandbox(server)
    try:
        assert sandbox.shell("printenv SSL_CERT_FILE").exit_code != 0  # nothing to trust yet
        updated = httpx.put(
            f"{server.url}/sandboxes/{sandbox.id}/network",
            json={"rules": _rules()},
            headers={"X-API-Key": server.api_key},
        )
        assert updated.status_code == 204, updated.text
        # Processes started from now on trust the proxy's CA; the rule applies at once.
        result = _curl(sandbox, f"https://bound.test:{port}/headers?late")
        assert result.exit_code == 0, result.stderr
        assert tls_upstream.seen("/headers?late")[-1]["authorization"] == f"Bearer {CANARY}"
        (update,) = [r for r in audit_records(server, sandbox.id) if r["event"] == "egress.update"]
        assert update["rules"] == {"bound.test": ["Authorization"]}
        assert update["secrets"] == ["gh-token"]
    finally:
        kill(sandbox)


def test_secret_changes_are_audited_without_values(server: RunningServer) -> None:
    first, second = f"AUDIT-{secrets.token_hex(8)}", f"AUDIT-{secrets.token_hex(8)}"
    with _api(server) as api:
        made = api.post("/secrets", json={"name": "audited", "value": first}).json()
        assert api.post(f"/secrets/{made['secretID']}", json={"value": second}).status_code == 200
        assert api.delete(f"/secrets/{made['secretID']}").status_code == 204
    text = (server.home / "audit" / "audit.jsonl").read_text()
    records = [json.loads(line) for line in text.splitlines()]
    changes = [
        (r["event"], r["detail"]["name"], r["detail"]["version"], r["outcome"])
        for r in records
        if r["event"].startswith("secret.") and r["detail"]["secret"] == made["secretID"]
    ]
    assert changes == [
        ("secret.created", "audited", 1, "ok"),
        ("secret.updated", "audited", 2, "ok"),
        ("secret.deleted", "audited", 2, "ok"),
    ]
    assert first not in text and second not in text
