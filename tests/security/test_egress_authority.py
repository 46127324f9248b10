"""Issue 12, class 8 — egress authority checks refuse, not repair — on every runtime.

A request whose ``Host`` names another authority than the one the proxy checked (the
absolute-form target, the CONNECT target, and inside a terminated tunnel the TLS server name
too) is answered 400 with a stable reason and an audit record, and nothing reaches the
upstream: each fixture server records every request it gets, and must record none. Equivalent
spellings (case, one trailing dot) are accepted and forwarded in canonical form. The
explicit-default-port cases (``a.test:80`` for ``http://a.test/``) need a fixture on port 80
and are proven without a sandbox in tests/unit/egress/test_authority.py.

Names: ``allowed.test`` (plain HTTP fixture), ``bound.test`` (TLS fixture, a secret is bound to
it, so its tunnels are terminated) and ``other.test`` (the same TLS fixture, allowed, unbound:
the obvious host to front).
"""

from __future__ import annotations

import secrets
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from tests.fixtures.egress import (
    EgressSandbox,
    Upstream,
    audit_records,
    kill,
    make_sandbox,
    upstream,
)
from tests.fixtures.server import RunningServer
from tests.fixtures.tls_upstream import TlsUpstream, tls_upstream

__all__ = ["tls_upstream", "upstream"]

_CA = "/run/sandgate/egress-ca.pem"


@pytest.fixture(scope="module")
def authority_server(
    upstream: Upstream,
    tls_upstream: TlsUpstream,
    runtime_server_factory: Callable[..., RunningServer],
    tmp_path_factory: pytest.TempPathFactory,
) -> RunningServer:
    secret_file = tmp_path_factory.mktemp("secret") / "token"
    secret_file.write_text(f"value-{secrets.token_hex(8)}\n")
    tls = tls_upstream.port
    loopback = ["127.0.0.1/32"]
    return runtime_server_factory(
        config={
            "secrets": {"TOKEN": {"file": str(secret_file)}},
            "egress": {
                "resolve_overrides": {
                    name: ["127.0.0.1"] for name in ("allowed.test", "bound.test", "other.test")
                },
                "allow": [
                    {"host": "allowed.test", "ports": [upstream.port], "addresses": loopback},
                    {"host": "bound.test", "ports": [tls], "addresses": loopback},
                    {"host": "other.test", "ports": [tls], "addresses": loopback},
                ],
                "secrets": [{"secret": "TOKEN", "hosts": ["bound.test"], "ports": [tls]}],
                "upstream_ca_file": str(tls_upstream.ca_file),
            },
        }
    )


@pytest.fixture
def box(authority_server: RunningServer) -> Iterator[EgressSandbox]:
    sandbox = make_sandbox(authority_server)
    yield sandbox
    kill(sandbox)


def _request(target: str, *host_lines: str, version: str = "HTTP/1.1") -> bytes:
    headers = "".join(f"{line}\r\n" for line in host_lines)
    return f"GET {target} {version}\r\n{headers}Connection: close\r\n\r\n".encode()


def _refusals(port: int) -> list[tuple[str, list[str], str]]:
    """(case, Host header lines, expected reason) for an authority ``<name>:port``; the
    name is filled in per position."""
    return [
        ("another_host", [f"Host: evil.test:{port}"], "host_mismatch"),
        ("another_allowed_host", ["Host: {other}"], "host_mismatch"),
        ("another_port", [f"Host: {{name}}:{port + 1}"], "host_mismatch"),
        ("port_left_out", ["Host: {name}"], "host_mismatch"),
        ("subdomain", [f"Host: x.{{name}}:{port}"], "host_mismatch"),
        ("ip_literal", [f"Host: 127.0.0.1:{port}"], "host_mismatch"),
        ("two_equal_hosts", [f"Host: {{name}}:{port}"] * 2, "host_duplicate"),
        ("two_hosts", [f"Host: {{name}}:{port}", f"Host: evil.test:{port}"], "host_duplicate"),
        ("empty_host", ["Host: "], "host_invalid"),
        ("userinfo", [f"Host: user@{{name}}:{port}"], "host_invalid"),
        ("percent_encoded", [f"Host: %61{{name}}:{port}"], "host_invalid"),
        ("unicode", [f"Host: {{name}}\u00e9:{port}"], "host_invalid"),
        ("bad_port", ["Host: {name}:"], "host_invalid"),
        ("no_host", [], "host_missing"),
    ]


def _fill(lines: list[str], name: str, other: str) -> list[str]:
    return [line.format(name=name, other=other) for line in lines]


def _denied(server: RunningServer, box: EgressSandbox, event: str) -> list[dict[str, Any]]:
    return [
        r for r in audit_records(server, box.id) if r["event"] == event and r["outcome"] == "denied"
    ]


def _assert_refused(answer: dict[str, Any], case: str, reason: str) -> None:
    assert answer["status"] == 400, (case, answer)
    assert answer["headers"]["x-sandgate-error"] == "bad_request", (case, answer)
    assert answer["headers"]["x-sandgate-reason"] == reason, (case, answer)
    assert answer["eof"], (case, answer)


def test_egress_authority_mismatch_refused_absolute_form(
    box: EgressSandbox, upstream: Upstream, authority_server: RunningServer
) -> None:
    port = upstream.port
    before = len(upstream.requests)
    cases = _refusals(port)
    for case, lines, reason in cases:
        target = f"http://allowed.test:{port}/{case}"
        raw = _request(target, *_fill(lines, "allowed.test", f"other.test:{port}"))
        _assert_refused(box.proxy(raw), case, reason)
    # The request line's own authority, spelled oddly, is still one authority.
    _assert_refused(
        box.proxy(_request(f"http://user@allowed.test:{port}/", f"Host: allowed.test:{port}")),
        "userinfo_in_target",
        "authority_invalid",
    )
    assert upstream.requests[before:] == [], "a refused request reached the upstream"
    denied = _denied(authority_server, box, "egress.connect")
    assert [r["reason"] for r in denied] == [r for _, _, r in cases] + ["authority_invalid"]
    assert denied[0]["host_header"] == [f"evil.test:{port}"]
    assert denied[0]["host"] == "allowed.test" and denied[0]["address"] is None


def test_egress_authority_origin_form_refused_whatever_the_host(
    box: EgressSandbox, upstream: Upstream, authority_server: RunningServer
) -> None:
    before = len(upstream.requests)
    for lines in ([f"Host: allowed.test:{upstream.port}"], ["Host: evil.test"], []):
        answer = box.proxy(_request("/", *lines))
        _assert_refused(answer, "origin_form", "target_form")
    assert upstream.requests[before:] == []
    assert [r["reason"] for r in _denied(authority_server, box, "egress.connect")] == [
        "target_form"
    ] * 3


def test_egress_authority_equivalent_spellings_forwarded_canonical(
    box: EgressSandbox, upstream: Upstream
) -> None:
    port = upstream.port
    before = len(upstream.requests)  # the upstream is shared with the module's other tests
    sent = [
        _request(f"http://allowed.test:{port}/eq-case", f"Host: ALLOWED.TEST:{port}"),
        _request(f"http://allowed.test:{port}/eq-dot", f"Host: allowed.test.:{port}"),
        _request(f"http://Allowed.Test.:{port}/eq-target", f"Host: allowed.test:{port}"),
        _request(f"http://allowed.test:{port}/eq-http10", version="HTTP/1.0"),
    ]
    for raw in sent:
        answer = box.proxy(raw)
        assert answer["status"] == 200, answer
    seen = [r for r in upstream.requests[before:] if r["path"].startswith("/eq-")]
    assert [(r["path"], r["host"]) for r in seen] == [
        (path, f"allowed.test:{port}")
        for path in ("/eq-case", "/eq-dot", "/eq-target", "/eq-http10")
    ]


def test_egress_authority_mismatch_refused_in_plain_tunnel(
    box: EgressSandbox, upstream: Upstream, authority_server: RunningServer
) -> None:
    port = upstream.port
    target = f"allowed.test:{port}"
    before = len(upstream.requests)
    cases = [
        *_refusals(port),
        ("absolute_form", [f"Host: {target}"], "target_form"),
    ]
    for case, lines, reason in cases:
        path = f"http://evil.test:{port}/" if case == "absolute_form" else f"/{case}"
        raw = _request(path, *_fill(lines, "allowed.test", f"other.test:{port}"))
        answer = box.probe("tunnel", target, raw.hex())
        assert answer["established"] == "HTTP/1.1 200 Connection Established", answer
        _assert_refused(answer, case, reason)
    # HTTP/1.0 has no Host of its own, but inside a tunnel one is required.
    http10 = box.probe("tunnel", target, _request("/http10", version="HTTP/1.0").hex())
    _assert_refused(http10, "http10_no_host", "host_missing")
    # HTTP/2 with prior knowledge would carry its authority in frames: refused, not spliced.
    h2c = box.probe("tunnel", target, b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n".hex())
    _assert_refused(h2c, "h2c_prior_knowledge", "bad_request")
    assert upstream.requests[before:] == [], "a refused request reached the upstream"
    denied = _denied(authority_server, box, "egress.request")
    assert [r["reason"] for r in denied] == [r for _, _, r in cases] + [
        "host_missing",
        "bad_request",
    ]
    closes = [r for r in audit_records(authority_server, box.id) if r["event"] == "egress.close"]
    assert {c["refused"] for c in closes} == {r for _, _, r in cases} | {"bad_request"}
    # The same tunnel with the right Host (any case, a trailing dot) is forwarded.
    fine = box.probe("tunnel", target, _request("/fine", f"Host: ALLOWED.test.:{port}").hex())
    assert fine["status"] == 200, fine
    assert upstream.requests[-1] == {"path": "/fine", "host": f"allowed.test:{port}"}


def test_egress_authority_mismatch_refused_in_terminated_tunnel(
    box: EgressSandbox, tls_upstream: TlsUpstream, authority_server: RunningServer
) -> None:
    port = tls_upstream.port
    target = f"bound.test:{port}"
    before = len(tls_upstream.requests)
    cases = _refusals(port)
    for case, lines, reason in cases:
        raw = _request(f"/{case}", *_fill(lines, "bound.test", f"other.test:{port}"))
        answer = box.probe("tls", target, "bound.test", _CA, raw.hex())
        assert answer["handshake"] is True, (case, answer)
        _assert_refused(answer, case, reason)
    # A server name other than the CONNECT host (even one this sandbox may reach) ends the
    # tunnel before any certificate is shown.
    fronted = box.probe("tls", target, "other.test", _CA, _request("/", f"Host: {target}").hex())
    assert fronted["handshake"] is False, fronted
    assert tls_upstream.requests[before:] == [], "a refused request reached the upstream"
    denied = _denied(authority_server, box, "egress.request")
    assert [r["reason"] for r in denied] == [r for _, _, r in cases]
    assert denied[1]["host_header"] == [f"other.test:{port}"]
    connects = _denied(authority_server, box, "egress.connect")
    assert [(r["reason"], r["sni"]) for r in connects] == [("sni_mismatch", "other.test")]
    # Equivalent spelling: accepted, and the upstream sees the canonical Host.
    fine = box.probe(
        "tls", target, "bound.test", _CA, _request("/fine", f"Host: BOUND.TEST.:{port}").hex()
    )
    assert fine["status"] == 200, fine
    assert tls_upstream.requests[-1]["host"] == f"bound.test:{port}"
