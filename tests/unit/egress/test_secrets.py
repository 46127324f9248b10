"""Secret placeholders, the response scrubber, ClientHello SNI parsing and the egress CA."""

from __future__ import annotations

import asyncio
import contextlib
import ssl
from pathlib import Path

import pytest
from cryptography import x509
from pydantic import ValidationError

from sandgate.config import Config, EgressConfig, SecretBinding, SecretSource
from sandgate.egress.clienthello import Malformed, read_first_flight, server_name
from sandgate.egress.placeholders import (
    PLACEHOLDER_PREFIX,
    SandboxSecrets,
    Scrubber,
    SecretUnavailable,
    bind_secrets,
    load_key,
)
from sandgate.egress.tls import EgressCA
from sandgate.secrets import SecretStore

VALUE = "ghp_CANARYvalue0123456789"


def _secrets(tmp_path: Path, sandbox: str = "sbx1", **binding: object) -> SandboxSecrets:
    fields: dict[str, object] = {"secret": "GH", "hosts": ["api.example.com"], **binding}
    bound = bind_secrets(
        [SecretBinding.model_validate(fields)],
        load_key(tmp_path / "key"),
        sandbox,
        template="base",
        agent=None,
    )
    store = SecretStore({"GH": SecretSource(env="GH_VALUE")}, environ={"GH_VALUE": VALUE})
    return SandboxSecrets(bound, store)


def test_placeholder_is_opaque_per_sandbox_and_stable(tmp_path: Path) -> None:
    one = _secrets(tmp_path).env["GH"]
    assert one.startswith(PLACEHOLDER_PREFIX)
    assert VALUE not in one
    assert _secrets(tmp_path).env["GH"] == one  # same key and sandbox: same (restart-safe)
    assert _secrets(tmp_path, sandbox="sbx2").env["GH"] != one
    assert (tmp_path / "key").stat().st_mode & 0o777 == 0o600


def test_substitution_only_in_bound_headers_of_bound_destination(tmp_path: Path) -> None:
    secrets = _secrets(tmp_path, headers=["Authorization", "X-Api-Key"])
    ph = secrets.env["GH"].encode()
    headers = [
        (b"Authorization", b"Bearer " + ph),
        (b"x-api-key", ph),
        (b"Cookie", b"t=" + ph),
        (b"X-Other", ph),
    ]
    out, used = secrets.substitute(headers, "api.example.com", 443)
    assert used == ["GH"]
    assert out == [
        (b"Authorization", b"Bearer " + VALUE.encode()),
        (b"x-api-key", VALUE.encode()),
        (b"Cookie", b"t=" + ph),
        (b"X-Other", ph),
    ]
    for host, port in (("evil.example.com", 443), ("api.example.com", 8443)):
        unchanged, none = secrets.substitute(headers, host, port)
        assert (unchanged, none) == (headers, [])
    assert secrets.intercepts("api.example.com", 443)
    assert not secrets.intercepts("api.example.com", 80)


def test_other_sandboxes_placeholder_stays_inert(tmp_path: Path) -> None:
    mine, theirs = _secrets(tmp_path), _secrets(tmp_path, sandbox="other")
    foreign = [(b"Authorization", theirs.env["GH"].encode())]
    assert mine.substitute(foreign, "api.example.com", 443) == (foreign, [])


def test_wildcard_binding_and_scope(tmp_path: Path) -> None:
    secrets = _secrets(tmp_path, hosts=["*.example.com"], templates=["base"])
    assert secrets.intercepts("a.b.example.com", 443)
    assert not secrets.intercepts("example.com", 443)
    assert not _secrets(tmp_path, templates=["other"])


def test_missing_or_unsafe_secret_is_a_clear_error(tmp_path: Path) -> None:
    bound = bind_secrets(
        [SecretBinding(secret="GH", hosts=["h.test"])], b"k", "s", template=None, agent=None
    )
    ph = bound[0].placeholder
    missing = SandboxSecrets(bound, SecretStore({"GH": SecretSource(env="NOPE")}, environ={}))
    with pytest.raises(SecretUnavailable, match="NOPE"):
        missing.substitute([(b"Authorization", ph)], "h.test", 443)
    broken = SandboxSecrets(
        bound, SecretStore({"GH": SecretSource(env="V")}, environ={"V": "a\r\nX: y"})
    )
    with pytest.raises(SecretUnavailable, match="line break"):
        broken.substitute([(b"Authorization", ph)], "h.test", 443)


@pytest.mark.parametrize("cut", [1, 3, 7, 12, 24, 25, 60])
def test_scrubber_masks_values_split_across_chunks(cut: int) -> None:
    secret = VALUE.encode()
    stream = b'{"headers": {"Authorization": "Bearer ' + secret + b'"}, "again": "' + secret + b'"}'
    scrubber = Scrubber([secret])
    out = b"".join(scrubber.feed(stream[i : i + cut]) for i in range(0, len(stream), cut))
    out += scrubber.flush()
    assert len(out) == len(stream)
    assert secret not in out
    assert out.count(b"*" * len(secret)) == 2


def test_scrubber_without_values_passes_through() -> None:
    scrubber = Scrubber([])
    assert scrubber.feed(b"abc") == b"abc"
    assert scrubber.flush() == b""


def test_binding_config_is_validated() -> None:
    with pytest.raises(ValidationError, match="named hosts"):
        SecretBinding(secret="GH", hosts=["10.0.0.1"])
    with pytest.raises(ValidationError, match="named hosts"):
        SecretBinding(secret="GH", hosts=["*"])
    with pytest.raises(ValidationError, match="cannot carry a secret"):
        SecretBinding(secret="GH", hosts=["a.test"], headers=["Host"])
    with pytest.raises(ValidationError, match="environment variable"):
        SecretBinding(secret="my-secret", hosts=["a.test"])
    with pytest.raises(ValidationError, match="another env"):
        EgressConfig(
            secrets=[
                SecretBinding(secret="A", env="TOKEN", hosts=["a.test"]),
                SecretBinding(secret="B", env="TOKEN", hosts=["b.test"]),
            ]
        )
    with pytest.raises(ValidationError, match="not declared in secrets"):
        Config.model_validate({"egress": {"secrets": [{"secret": "GH", "hosts": ["a.test"]}]}})


def _client_hello(sni: str | None) -> bytes:
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    incoming, outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
    tls = context.wrap_bio(incoming, outgoing, server_hostname=sni)
    with pytest.raises(ssl.SSLWantReadError):
        tls.do_handshake()
    return outgoing.read()


async def _flight(data: bytes) -> object:
    reader = asyncio.StreamReader()
    reader.feed_data(data)
    reader.feed_eof()
    return await read_first_flight(reader)


def test_first_flight_reads_sni_and_keeps_bytes() -> None:
    hello = _client_hello("allowed.test")
    flight = asyncio.run(_flight(hello + b"trailing"))
    assert flight.is_tls and flight.sni == "allowed.test"  # type: ignore[attr-defined]
    assert flight.raw == hello  # type: ignore[attr-defined]
    assert asyncio.run(_flight(_client_hello(None))).sni is None  # type: ignore[attr-defined]


def test_first_flight_of_a_fragmented_hello() -> None:
    hello = _client_hello("allowed.test")
    body = hello[5:]
    fragments = b"".join(
        b"\x16\x03\x01" + len(body[i : i + 100]).to_bytes(2, "big") + body[i : i + 100]
        for i in range(0, len(body), 100)
    )
    flight = asyncio.run(_flight(fragments))
    assert flight.sni == "allowed.test"  # type: ignore[attr-defined]
    assert flight.raw == fragments  # type: ignore[attr-defined]


def test_first_flight_of_plain_bytes_is_not_tls() -> None:
    flight = asyncio.run(_flight(b"SSH-2.0-x\r\n"))
    assert (flight.is_tls, flight.raw) == (False, b"S")  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    "data",
    [
        b"\x16\x03\x01\x00\x00",
        b"\x16\x03\x01\xff\xff" + b"\x01" * 10,
        b"\x16\x03\x01\x00\x04\x02\x00\x00\x00",
        b"\x16\x03\x01\x00\x06\x01\x00\x00\x02\x03\x03",
    ],
    ids=["empty_record", "oversized", "not_client_hello", "truncated"],
)
def test_malformed_hellos_are_refused(data: bytes) -> None:
    with pytest.raises((Malformed, asyncio.IncompleteReadError)):
        asyncio.run(_flight(data))


def test_truncations_of_a_real_hello_never_crash() -> None:
    hello = _client_hello("allowed.test")[5:]
    for end in range(len(hello)):
        try:
            server_name(hello[:end])
        except Malformed:
            continue


def test_ca_is_created_once_and_mints_certificates_it_signed(tmp_path: Path) -> None:
    ca = EgressCA(tmp_path / "egress")
    assert (tmp_path / "egress" / "ca.key").stat().st_mode & 0o777 == 0o600
    again = EgressCA(tmp_path / "egress")
    assert again.pem == ca.pem
    cert = x509.load_pem_x509_certificate(ca.pem)
    assert cert.extensions.get_extension_for_class(x509.BasicConstraints).value.path_length == 0
    context = ca.server_context("api.example.com")
    assert ca.server_context("api.example.com") is context
    # A client trusting only the CA completes a handshake for that name.
    client = ssl.create_default_context(cadata=ca.pem.decode())
    c_in, c_out, s_in, s_out = (ssl.MemoryBIO() for _ in range(4))
    tls_client = client.wrap_bio(c_in, c_out, server_hostname="api.example.com")
    tls_server = context.wrap_bio(s_in, s_out, server_side=True)
    for _ in range(10):
        for side, out, into in ((tls_client, c_out, s_in), (tls_server, s_out, c_in)):
            with contextlib.suppress(ssl.SSLWantReadError):
                side.do_handshake()
            into.write(out.read())
    assert tls_client.getpeercert()["subjectAltName"] == (("DNS", "api.example.com"),)
