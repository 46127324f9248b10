"""Egress names, addresses, rules and request parsing, without a sandbox."""

from __future__ import annotations

import ipaddress

import pytest

from sandgate.config import EgressConfig
from sandgate.egress import build_policy
from sandgate.egress.addresses import address_refusal
from sandgate.egress.names import InvalidHost, canonical_host
from sandgate.egress.request import BadRequest, parse_request
from sandgate.errors import InvalidRequest


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("API.Example.COM.", "api.example.com"),
        ("bücher.example", "xn--bcher-kva.example"),
        ("2130706433", ipaddress.ip_address("127.0.0.1")),
        ("0x7f000001", ipaddress.ip_address("127.0.0.1")),
        ("0177.0.0.1", ipaddress.ip_address("127.0.0.1")),
        ("127.1", ipaddress.ip_address("127.0.0.1")),
        ("[::ffff:127.0.0.1]", ipaddress.ip_address("::ffff:127.0.0.1")),
    ],
)
def test_canonical_host(text: str, expected: object) -> None:
    assert canonical_host(text) == expected


@pytest.mark.parametrize(
    "text", ["user@host.test", "a_b.test", "-x.test", "1.2.3.4.5", "host .test", "", "a/b"]
)
def test_canonical_host_refuses(text: str) -> None:
    with pytest.raises(InvalidHost):
        canonical_host(text)


@pytest.mark.parametrize(
    ("address", "allowed", "reason"),
    [
        ("93.184.215.14", [], None),
        ("10.0.0.5", [], "resolved_to_private"),
        ("100.64.1.1", [], "resolved_to_private"),
        ("224.0.1.1", [], "resolved_to_private"),
        ("::ffff:10.0.0.1", [], "resolved_to_private"),
        ("2002:a00:1::", [], "resolved_to_private"),
        ("64:ff9b::a00:1", [], "resolved_to_private"),
        ("127.0.0.1", ["127.0.0.1/32"], None),
        ("169.254.169.254", ["169.254.0.0/16"], "metadata_address"),
        ("::ffff:169.254.169.254", ["::/0"], "metadata_address"),
        ("fd00:ec2::254", ["fd00::/8"], "metadata_address"),
    ],
)
def test_address_refusal(address: str, allowed: list[str], reason: str | None) -> None:
    networks = [ipaddress.ip_network(n) for n in allowed]
    assert address_refusal(ipaddress.ip_address(address), networks) == reason


def _config(**egress: object) -> EgressConfig:
    return EgressConfig.model_validate(egress)


def test_default_policy_allows_nothing_even_with_internet_access() -> None:
    policy = build_policy(
        _config(), template="base", agent=None, internet_access=True, network=None
    )
    assert policy.decide("example.com", 443).reason == "host_not_allowed"
    assert policy.decide(ipaddress.ip_address("1.1.1.1"), 443).reason == "ip_literal"


def test_wildcards_match_subdomains_only_and_ports_are_checked() -> None:
    config = _config(allow=["*.example.com:443"], templates={"node": ["npmjs.org"]})
    policy = build_policy(config, template="base", agent=None, internet_access=False, network=None)
    assert policy.decide("a.b.example.com", 443).allowed
    assert not policy.decide("example.com", 443).allowed
    assert not policy.decide("evilexample.com", 443).allowed
    assert policy.decide("a.example.com", 80).reason == "port_not_allowed"
    assert not policy.decide("npmjs.org", 443).allowed
    node = build_policy(config, template="node", agent=None, internet_access=False, network=None)
    assert node.decide("npmjs.org", 443).rule == "template:node#0"


def test_internet_access_rules_need_the_flag() -> None:
    config = _config(internet_access=["*"])
    off = build_policy(config, template=None, agent=None, internet_access=False, network=None)
    on = build_policy(config, template=None, agent=None, internet_access=True, network=None)
    assert not off.decide("example.com", 443).allowed
    assert on.decide("example.com", 443).allowed
    assert not on.decide(ipaddress.ip_address("93.184.215.14"), 443).allowed
    assert on.decide("example.com", 25).reason == "port_blocked"


def test_api_allow_out_is_bounded_by_the_ceiling() -> None:
    config = _config(api_allow_out=["*.github.com:443"])
    ok = build_policy(
        config,
        template=None,
        agent=None,
        internet_access=True,
        network={"allow_out": ["api.github.com", "*.raw.github.com:443"]},
    )
    assert ok.decide("api.github.com", 443).rule == "network.allowOut#0"
    assert ok.decide("x.raw.github.com", 443).allowed
    for wanted in ("github.com", "*.com", "api.github.com:22", "*", "10.0.0.1"):
        with pytest.raises(InvalidRequest):
            build_policy(
                config,
                template=None,
                agent=None,
                internet_access=True,
                network={"allow_out": [wanted]},
            )
    adopted = build_policy(
        config,
        template=None,
        agent=None,
        internet_access=True,
        network={"allow_out": ["github.com"]},
        strict=False,
    )
    assert not adopted.decide("github.com", 443).allowed


def test_deny_out_wins_over_operator_rules_but_not_allow_out() -> None:
    config = _config(allow=["a.test"], api_allow_out=["b.test"])
    policy = build_policy(
        config,
        template=None,
        agent=None,
        internet_access=True,
        network={"allow_out": ["b.test"], "deny_out": ["0.0.0.0/0"]},
    )
    assert policy.decide("a.test", 443).reason == "denied_by_request"
    assert policy.decide("b.test", 443).allowed


def test_connect_request() -> None:
    request = parse_request(b"CONNECT [::1]:443 HTTP/1.1\r\nHost: x\r\n\r\n")
    assert (request.method, request.host, request.port, request.origin_target) == (
        "CONNECT",
        "[::1]",
        443,
        "",
    )


def test_absolute_form_request_names_its_authority_and_origin_target() -> None:
    request = parse_request(
        b"GET http://a.test:8080/p?q=1 HTTP/1.1\r\nHost: evil.test\r\nAccept: */*\r\n\r\n"
    )
    assert (request.host, request.port, request.origin_target) == ("a.test", 8080, "/p?q=1")
    # The head is kept as sent: the Host is checked (and refused) later, never rewritten.
    assert request.head.values(b"host") == [b"evil.test"]
    assert parse_request(b"GET http://a.test HTTP/1.0\r\n\r\n").origin_target == "/"


@pytest.mark.parametrize(
    "raw",
    [
        b"GET https://a.test/ HTTP/1.1\r\n\r\n",
        b"GET /relative HTTP/1.1\r\n\r\n",
        b"GET http://u:p@a.test/ HTTP/1.1\r\n\r\n",
        b"CONNECT a.test HTTP/1.1\r\n\r\n",
        b"GET http://a.test/ HTTP/2\r\n\r\n",
        b"GET http://a.test/\r\n\r\n",
        b"GET http://a.te\tst/ HTTP/1.1\r\n\r\n",
        b"GET http://a.test/#frag HTTP/1.1\r\n\r\n",
    ],
)
def test_bad_requests(raw: bytes) -> None:
    with pytest.raises(BadRequest):
        parse_request(raw)


@pytest.mark.parametrize(
    "raw", [b"GET / HTTP/1.1\r\nHost: a.test\r\n\r\n", b"OPTIONS * HTTP/1.1\r\n\r\n"]
)
def test_origin_form_at_the_proxy_is_refused_whatever_the_host(raw: bytes) -> None:
    with pytest.raises(BadRequest) as refused:
        parse_request(raw)
    assert refused.value.reason == "target_form"


def test_reaches_internet_only_with_an_any_host_rule() -> None:
    def reaches(internet_access: bool, **network: object) -> bool:
        config = _config(allow=["pypi", "a.test"], internet_access=["internet"])
        return build_policy(
            config,
            template=None,
            agent=None,
            internet_access=internet_access,
            network=network or None,
        ).reaches_internet

    assert reaches(True)
    assert not reaches(False)
    assert not reaches(True, deny_out=["0.0.0.0/0"])
    assert reaches(True, deny_out=["evil.test"])
    only_smtp = _config(allow=[{"host": "*", "ports": [25]}])
    policy = build_policy(only_smtp, template=None, agent=None, internet_access=True, network=None)
    assert not policy.reaches_internet


def test_preset_rules_compile_to_their_hosts_under_one_id() -> None:
    config = _config(allow=["a.test:443", "debian"], internet_access=["internet"])
    policy = build_policy(config, template=None, agent=None, internet_access=False, network=None)
    assert policy.decide("deb.debian.org", 80).rule == "allow#1:debian"
    assert policy.decide("security.debian.org", 443).rule == "allow#1:debian"
    assert policy.decide("a.test", 443).rule == "allow#0"
    assert policy.summary["allow"] == ["allow#0", "allow#1:debian"]
    on = build_policy(config, template=None, agent=None, internet_access=True, network=None)
    assert on.decide("example.com", 80).rule == "internet_access#0:internet"
    assert on.decide("example.com", 8080).reason == "port_not_allowed"
    assert on.decide(ipaddress.ip_address("93.184.215.14"), 443).reason == "ip_literal"
