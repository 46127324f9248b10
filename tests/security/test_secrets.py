"""security.md §2.7 (SEC), NET-08 and MT-08: secret placeholders and TLS interception, on
every runtime.

A canary secret (``CANARY-<random>``, read by the gateway from a file) is bound to
``bound.test`` and ``wrong.test``; ``other.test`` is allowed but unbound. All three names map
onto the test's own HTTPS echo server on the host's loopback, whose certificate (from a test
CA the gateway is told about in ``egress.upstream_ca_file``) names ``bound.test`` and
``other.test`` only.
"""

from __future__ import annotations

import base64
import json
import secrets
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.fixtures.egress import (
    EgressSandbox,
    audit_records,
    kill,
    make_sandbox,
    records_once,
    search_inside,
)
from tests.fixtures.server import RunningServer
from tests.fixtures.tls_upstream import TlsUpstream, tls_upstream

__all__ = ["tls_upstream"]

CANARY = f"CANARY-{secrets.token_hex(12)}"


@pytest.fixture(scope="module")
def secret_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The canary's file on the host, which the gateway reads."""
    path = tmp_path_factory.mktemp("secret") / "gh.token"
    path.write_text(CANARY + "\n")
    return path


@pytest.fixture(scope="module")
def secret_server(
    tls_upstream: TlsUpstream,
    runtime_server_factory: Callable[..., RunningServer],
    secret_file: Path,
) -> RunningServer:
    port = tls_upstream.port
    names = ("bound.test", "other.test", "wrong.test")
    config = {
        "secrets": {"GH": {"file": str(secret_file)}},
        "egress": {
            "resolve_overrides": {name: ["127.0.0.1"] for name in names},
            "allow": [
                {"host": name, "ports": [port], "addresses": ["127.0.0.1/32"]} for name in names
            ],
            "secrets": [
                {
                    "secret": "GH",
                    "env": "GH_TOKEN",
                    "hosts": ["bound.test", "wrong.test"],
                    "ports": [port],
                    "headers": ["Authorization", "X-Api-Key"],
                }
            ],
            "upstream_ca_file": str(tls_upstream.ca_file),
        },
    }
    return runtime_server_factory(config=config)


@pytest.fixture
def box(secret_server: RunningServer, tls_upstream: TlsUpstream) -> Iterator[EgressSandbox]:
    sandbox = make_sandbox(secret_server)
    ca = base64.b64encode(tls_upstream.ca_pem.encode()).decode()
    # The upstream's own CA, for tunnels the proxy does not terminate (other.test).
    setup = sandbox.shell(
        f"echo {ca} | base64 -d > /tmp/upstream-ca.pem && "
        "cat /run/sandgate/ca-certificates.crt /tmp/upstream-ca.pem > /tmp/all-ca.pem"
    )
    assert setup.exit_code == 0, setup.stderr
    yield sandbox
    kill(sandbox)


def _placeholder(box: EgressSandbox) -> str:
    value = box.shell("printenv GH_TOKEN").stdout.strip()
    assert value.startswith("sandgate-placeholder-"), value
    return value


def _curl(box: EgressSandbox, args: str) -> Any:
    return box.shell(f"curl -sS -m 20 -D - {args}")


def _records(server: RunningServer, sandbox: str, event: str) -> list[dict[str, Any]]:
    return [r for r in audit_records(server, sandbox) if r["event"] == event]


def test_SEC_04_bound_host_gets_the_value_and_reflections_are_masked(
    box: EgressSandbox, tls_upstream: TlsUpstream, secret_server: RunningServer
) -> None:
    port = tls_upstream.port
    # curl verifies bound.test's (minted) certificate through $CURL_CA_BUNDLE, via $HTTPS_PROXY.
    result = _curl(box, f'https://bound.test:{port}/headers -H "Authorization: Bearer $GH_TOKEN"')
    assert result.exit_code == 0, result.stderr
    assert tls_upstream.seen("/headers")[-1]["authorization"] == f"Bearer {CANARY}"
    assert CANARY not in result.stdout
    masked = "*" * len(CANARY)
    assert f"x-echo-authorization: bearer {masked}" in result.stdout.lower()
    assert json.loads(result.stdout.rsplit("\r\n\r\n", 1)[1])["headers"]["Authorization"] == (
        f"Bearer {masked}"
    )
    # Python's standard library: $SSL_CERT_FILE and $HTTPS_PROXY, another bound header.
    script = (
        "import os, urllib.request as u; "
        f"r = u.Request('https://bound.test:{port}/headers?py', "
        "headers={'X-Api-Key': os.environ['GH_TOKEN']}); "
        "print(u.urlopen(r, timeout=20).read().decode())"
    )
    python = box.shell(f'python3 -c "{script}"')
    assert python.exit_code == 0, python.stderr
    assert tls_upstream.seen("/headers?py")[-1]["x-api-key"] == CANARY
    assert CANARY not in python.stdout
    (request, second) = _records(secret_server, box.id, "egress.request")
    assert (request["path"], request["secrets"], request["reason"]) == (
        "/headers",
        ["GH"],
        "secret_substituted",
    )
    assert second["path"] == "/headers"  # the query string is not recorded


def test_SEC_01_only_the_placeholder_is_inside(
    box: EgressSandbox,
    tls_upstream: TlsUpstream,
    secret_server: RunningServer,
    secret_file: Path,
) -> None:
    placeholder = _placeholder(box)
    used = _curl(
        box, f'https://bound.test:{tls_upstream.port}/headers -H "Authorization: Bearer $GH_TOKEN"'
    )
    assert used.exit_code == 0, used.stderr
    box.shell("history -s 'curl $GH_TOKEN'; sleep 300 >/dev/null 2>&1 &")
    # From the canary's file on: a runtime that mounted it in would show it.
    since = secret_file.stat().st_ctime
    hits = search_inside(box, {"canary": CANARY, "placeholder": placeholder}, since=since)
    assert hits["canary"] == []
    assert any(p.startswith("/proc/") for p in hits["placeholder"])  # the search works
    assert CANARY not in (secret_server.home / "audit" / "audit.jsonl").read_text()
    assert CANARY not in secret_server.log_text()


def test_SEC_02_unbound_host_and_unbound_places_keep_the_placeholder(
    box: EgressSandbox, tls_upstream: TlsUpstream
) -> None:
    placeholder = _placeholder(box)
    port = tls_upstream.port
    other = _curl(
        box,
        f"--cacert /tmp/upstream-ca.pem https://other.test:{port}/headers?b "
        '-H "Authorization: Bearer $GH_TOKEN"',
    )
    assert other.exit_code == 0, other.stderr
    assert tls_upstream.seen("/headers?b")[-1]["authorization"] == f"Bearer {placeholder}"
    # On the bound host, only the bound headers change: not the URL, a cookie or the body.
    bound = _curl(
        box,
        f'"https://bound.test:{port}/post?t=$GH_TOKEN" -H "Cookie: t=$GH_TOKEN" '
        '--data-binary "token=$GH_TOKEN"',
    )
    assert bound.exit_code == 0, bound.stderr
    (seen,) = tls_upstream.seen("/post?t=")[-1:]
    assert seen["path"] == f"/post?t={placeholder}"
    assert seen["cookie"] == f"t={placeholder}"
    assert seen["body"] == f"token={placeholder}"


def test_SEC_05_redirect_chase_sends_only_the_placeholder_on(
    box: EgressSandbox, tls_upstream: TlsUpstream
) -> None:
    placeholder = _placeholder(box)
    result = _curl(
        box,
        f"-L --location-trusted --cacert /tmp/all-ca.pem "
        f'https://bound.test:{tls_upstream.port}/redirect -H "Authorization: Bearer $GH_TOKEN"',
    )
    assert result.exit_code == 0, result.stderr
    first, then = tls_upstream.requests[-2:]
    assert (first["path"], first["host"]) == ("/redirect", f"bound.test:{tls_upstream.port}")
    assert first["authorization"] == f"Bearer {CANARY}"
    assert (then["host"], then["authorization"]) == (
        f"other.test:{tls_upstream.port}",
        f"Bearer {placeholder}",
    )


def test_NET_08_sni_must_name_the_connect_host_on_spliced_tunnels(
    box: EgressSandbox, tls_upstream: TlsUpstream, secret_server: RunningServer
) -> None:
    target = f"other.test:{tls_upstream.port}"
    request = f"GET /headers?sni HTTP/1.1\r\nHost: {target}\r\nConnection: close\r\n\r\n"
    fronted = box.probe("tls", target, "evil.test", "/tmp/upstream-ca.pem", request.encode().hex())
    assert fronted["handshake"] is False, fronted
    denied = [
        r for r in _records(secret_server, box.id, "egress.connect") if r["outcome"] == "denied"
    ]
    assert [(r["reason"], r["sni"]) for r in denied] == [("sni_mismatch", "evil.test")]
    matching = box.probe(
        "tls", target, "other.test", "/tmp/upstream-ca.pem", request.encode().hex()
    )
    assert (matching["handshake"], matching["status"]) == (True, 200), matching
    assert tls_upstream.seen("/headers?sni")  # the spliced tunnel reached the real server


def test_NET_08_terminated_tunnels_check_sni_and_host(
    box: EgressSandbox, tls_upstream: TlsUpstream, secret_server: RunningServer
) -> None:
    target = f"bound.test:{tls_upstream.port}"
    before = len(tls_upstream.requests)
    fronted = box.probe(
        "tls",
        target,
        "evil.test",
        "/run/sandgate/egress-ca.pem",
        b"GET / HTTP/1.1\r\n\r\n".hex(),
    )
    assert fronted["handshake"] is False, fronted
    request = "GET /headers HTTP/1.1\r\nHost: evil.test\r\nAuthorization: x\r\n\r\n"
    misdirected = box.probe(
        "tls", target, "bound.test", "/run/sandgate/egress-ca.pem", request.encode().hex()
    )
    assert misdirected["cert_names"] == ["bound.test"]  # minted by the install's CA
    assert misdirected["status"] == 400, misdirected
    assert misdirected["headers"]["x-sandgate-reason"] == "host_mismatch"
    assert tls_upstream.requests[before:] == []
    closes = _records(secret_server, box.id, "egress.close")
    assert [c.get("refused") for c in closes][-1] == "host_mismatch"
    (refused,) = _records(secret_server, box.id, "egress.request")
    assert (refused["outcome"], refused["reason"], refused["host_header"]) == (
        "denied",
        "host_mismatch",
        ["evil.test"],
    )


def test_NET_10_terminated_tunnels_parse_strictly_and_never_hang(
    box: EgressSandbox, tls_upstream: TlsUpstream, secret_server: RunningServer
) -> None:
    target = f"bound.test:{tls_upstream.port}"
    ca = "/run/sandgate/egress-ca.pem"
    before = len(tls_upstream.requests)
    smuggled = (
        f"POST /upload HTTP/1.1\r\nHost: {target}\r\nContent-Length: 5\r\n"
        "Transfer-Encoding: chunked\r\n\r\n0\r\n\r\nGET /smuggled HTTP/1.1\r\n\r\n"
    )
    answer = box.probe("tls", target, "bound.test", ca, smuggled.encode().hex())
    assert (answer["status"], answer["headers"]["x-sandgate-error"]) == (400, "bad_request")
    broken_chunks = (
        f"POST /upload HTTP/1.1\r\nHost: {target}\r\nTransfer-Encoding: chunked\r\n\r\n"
        "zz\r\nnot a chunk\r\n"
    )
    answer = box.probe("tls", target, "bound.test", ca, broken_chunks.encode().hex())
    assert answer["status"] == 400, answer  # answered at once, not after the idle timeout
    assert all(r["path"] != "/smuggled" for r in tls_upstream.requests[before:])
    # A well-formed chunked upload goes through, re-framed.
    chunked = box.shell(
        f"head -c 70000 /dev/zero | curl -sS -m 20 -H 'Transfer-Encoding: chunked' "
        f"--data-binary @- https://{target}/upload"
    )
    assert chunked.stdout == "received 70000 bytes", chunked.stdout + chunked.stderr


def test_bound_host_with_an_unverifiable_certificate_gets_nothing(
    box: EgressSandbox, tls_upstream: TlsUpstream, secret_server: RunningServer
) -> None:
    # wrong.test resolves to the fixture, whose certificate does not name it.
    before = len(tls_upstream.requests)
    result = _curl(
        box, f'https://wrong.test:{tls_upstream.port}/headers -H "Authorization: Bearer $GH_TOKEN"'
    )
    assert "HTTP/1.1 502" in result.stdout, result.stdout
    assert "x-sandgate-reason: upstream_tls_failed" in result.stdout.lower()
    assert tls_upstream.requests[before:] == []
    reasons = [r["reason"] for r in _records(secret_server, box.id, "egress.connect")]
    assert reasons[-1] == "upstream_tls_failed"


def test_NET_18_MT_08_another_sandboxes_placeholder_is_inert_alive_or_deleted(
    secret_server: RunningServer, tls_upstream: TlsUpstream
) -> None:
    first = make_sandbox(secret_server)
    second = make_sandbox(secret_server)
    url = f"https://bound.test:{tls_upstream.port}/headers"
    try:
        theirs = _placeholder(first)
        assert _placeholder(second) != theirs
        for query in ("alive", "deleted"):
            if query == "deleted":
                kill(first)
            result = _curl(second, f'{url}?{query} -H "Authorization: Bearer {theirs}"')
            assert result.exit_code == 0, result.stderr
            assert tls_upstream.seen(f"/headers?{query}")[-1]["authorization"] == (
                f"Bearer {theirs}"
            )
    finally:
        kill(first)
        kill(second)


def test_NET_17_bytes_to_allowed_hosts_are_audited(
    box: EgressSandbox, tls_upstream: TlsUpstream, secret_server: RunningServer
) -> None:
    size = 300_000
    port = tls_upstream.port
    box.shell(f"head -c {size} /dev/urandom > /tmp/blob")
    closed_before = len(_records(secret_server, box.id, "egress.close"))
    for host, ca in (("other.test", "--cacert /tmp/upstream-ca.pem"), ("bound.test", "")):
        sent = _curl(box, f"{ca} https://{host}:{port}/upload --data-binary @/tmp/blob")
        assert sent.exit_code == 0, sent.stderr
        assert f"received {size} bytes" in sent.stdout
    closes = records_once(
        secret_server, box.id, "egress.close", lambda rs: len(rs) >= closed_before + 2
    )
    spliced, terminated = closes[-2:]
    assert (spliced["host"], terminated["host"]) == ("other.test", "bound.test")
    assert spliced["bytes_up"] > size  # TLS records on the wire
    assert terminated["bytes_up"] == size  # the request body, as the proxy read it
    assert terminated["status"] == 200


def test_sandbox_without_bindings_keeps_its_trust_store(
    runtime_server_factory: Callable[..., RunningServer], tmp_path: Path
) -> None:
    server = runtime_server_factory(
        config={
            "secrets": {"GH": {"file": str(tmp_path / "missing")}},
            "egress": {
                "secrets": [{"secret": "GH", "hosts": ["bound.test"], "templates": ["other"]}]
            },
        }
    )
    box = make_sandbox(server)
    try:
        env = box.shell("env").stdout
        assert "GH=" not in env and "SSL_CERT_FILE" not in env
        assert box.shell("test -e /run/sandgate/egress-ca.pem").exit_code == 1
    finally:
        kill(box)
