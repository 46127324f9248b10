"""HTTPS for the server's port: the local CA (private key 0600, name constraints that clients
enforce), the names its certificate covers, renewal before expiry and reloading an operator's
certificate, each proved by real TLS handshakes (in memory, through OpenSSL)."""

from __future__ import annotations

import datetime as dt
import shutil
import ssl
import stat
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from sandgate.config import ServerConfig, TlsConfig
from sandgate.errors import ConfigError
from sandgate.tls import LEAF_LIFETIME, LEAF_RENEW_BEFORE, ServerTLS, client_trust_env

DOMAIN = "sandbox.localhost"


class Clock:
    def __init__(self) -> None:
        self.now = dt.datetime.now(dt.UTC)

    def __call__(self) -> dt.datetime:
        return self.now


def _server(mode: str = "local-ca", **tls: object) -> ServerConfig:
    return ServerConfig(domain=DOMAIN, tls=TlsConfig(mode=mode, **tls))  # type: ignore[arg-type]


def handshake(
    server: ssl.SSLContext, name: str, cafile: Path, *, verify: bool = True
) -> x509.Certificate:
    """A full TLS handshake between ``server`` and a client asking for ``name`` (verifying
    unless told not to: a certificate issued at a simulated future time is not valid yet by
    the real clock); returns the certificate presented. Raises ``ssl.SSLError`` if refused."""
    client = ssl.create_default_context(cafile=str(cafile))
    if not verify:
        client.check_hostname = False
        client.verify_mode = ssl.CERT_NONE
    c_in, c_out, s_in, s_out = (ssl.MemoryBIO() for _ in range(4))
    client_side = client.wrap_bio(c_in, c_out, server_hostname=name)
    server_side = server.wrap_bio(s_in, s_out, server_side=True)
    done = {"client": False, "server": False}
    for _ in range(20):
        for side, obj in (("client", client_side), ("server", server_side)):
            if not done[side]:
                try:
                    obj.do_handshake()
                    done[side] = True
                except ssl.SSLWantReadError:
                    pass
        s_in.write(c_out.read())
        c_in.write(s_out.read())
        if all(done.values()):
            break
    der = client_side.getpeercert(binary_form=True)
    assert der is not None
    return x509.load_der_x509_certificate(der)


def test_local_ca_is_private_constrained_and_covers_the_e2b_host_scheme(tmp_path: Path) -> None:
    tls = ServerTLS(_server(), tmp_path)
    tls.prepare()
    assert tls.ca is not None and tls.ca_file is not None
    assert stat.S_IMODE((tmp_path / "tls" / "ca.key").stat().st_mode) == 0o600
    assert stat.S_IMODE(tls.key_file.stat().st_mode) == 0o600
    extensions = x509.load_pem_x509_certificate(tls.ca.pem).extensions
    assert extensions.get_extension_for_class(x509.NameConstraints).critical
    context = tls.context()
    for name in (f"api.{DOMAIN}", f"49983-abc123.{DOMAIN}", f"8000-abc123.{DOMAIN}", DOMAIN):
        presented = handshake(context, name, tls.ca_file)
        assert presented.subject.rfc4514_string() == f"CN={DOMAIN}"
    assert handshake(context, "127.0.0.1", tls.ca_file)
    with pytest.raises(ssl.SSLCertVerificationError):
        handshake(context, "example.com", tls.ca_file)
    # The bundle keeps the system's roots and adds the CA; Node gets the CA alone.
    env = client_trust_env(tls)
    bundle = Path(env["SSL_CERT_FILE"]).read_bytes()
    assert tls.ca.pem in bundle and bundle.count(b"BEGIN CERTIFICATE") > 1
    assert env["NODE_EXTRA_CA_CERTS"] == str(tls.ca_file)


def test_the_ca_cannot_vouch_for_other_sites_even_if_its_key_leaks(tmp_path: Path) -> None:
    tls = ServerTLS(_server(), tmp_path)
    tls.prepare()
    assert tls.ca_file is not None
    ca_key = serialization.load_pem_private_key(
        (tmp_path / "tls" / "ca.key").read_bytes(), password=None
    )
    assert isinstance(ca_key, ec.EllipticCurvePrivateKey)
    ca_cert = x509.load_pem_x509_certificate(tls.ca_file.read_bytes())
    forged_key = ec.generate_private_key(ec.SECP256R1())
    now = dt.datetime.now(dt.UTC)
    forged = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "bank.example")]))
        .issuer_name(ca_cert.subject)
        .public_key(forged_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(hours=1))
        .not_valid_after(now + dt.timedelta(days=1))
        .add_extension(x509.SubjectAlternativeName([x509.DNSName("bank.example")]), False)
        .sign(ca_key, hashes.SHA256())
    )
    cert_file, key_file = tmp_path / "forged.pem", tmp_path / "forged.key"
    cert_file.write_bytes(forged.public_bytes(serialization.Encoding.PEM))
    key_file.write_bytes(
        forged_key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    server = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server.load_cert_chain(cert_file, key_file)
    with pytest.raises(ssl.SSLCertVerificationError, match=r"permitted|constraint"):
        handshake(server, "bank.example", tls.ca_file)


def test_the_certificate_is_renewed_before_it_expires(tmp_path: Path) -> None:
    clock = Clock()
    tls = ServerTLS(_server(), tmp_path, clock=clock)
    context = tls.context()
    assert tls.ca_file is not None
    first = handshake(context, f"api.{DOMAIN}", tls.ca_file)
    assert first.not_valid_after_utc - clock.now <= LEAF_LIFETIME
    clock.now += dt.timedelta(minutes=30)
    assert handshake(context, f"api.{DOMAIN}", tls.ca_file).serial_number == first.serial_number
    # Once less than LEAF_RENEW_BEFORE is left, the next handshake gets a new certificate.
    clock.now = first.not_valid_after_utc - LEAF_RENEW_BEFORE + dt.timedelta(minutes=1)
    renewed = handshake(context, f"api.{DOMAIN}", tls.ca_file, verify=False)
    assert renewed.serial_number != first.serial_number
    assert renewed.not_valid_after_utc > first.not_valid_after_utc
    # A restart keeps the fresh one (no new certificate at every start).
    again = ServerTLS(_server(), tmp_path, clock=clock).context()
    assert handshake(again, DOMAIN, tls.ca_file, verify=False).serial_number == (
        renewed.serial_number
    )


def test_an_operator_certificate_is_reloaded_when_it_changes_and_a_bad_one_is_not_used(
    tmp_path: Path,
) -> None:
    # Two certificates for the domain, made by a CA the "operator" runs.
    issuer = ServerTLS(_server(), tmp_path / "issuer")
    issuer.prepare()
    assert issuer.ca is not None and issuer.ca_file is not None
    live_cert, live_key = tmp_path / "live.pem", tmp_path / "live.key"
    shutil.copy(issuer.cert_file, live_cert)
    shutil.copy(issuer.key_file, live_key)
    clock = Clock()
    tls = ServerTLS(_server("files", cert_file=live_cert, key_file=live_key), tmp_path, clock=clock)
    assert tls.ca is None and client_trust_env(tls) == {}
    context = tls.context()
    first = handshake(context, f"api.{DOMAIN}", issuer.ca_file)

    issuer.ca.issue(live_cert, live_key, clock.now)  # a renewal lands in place
    clock.now += dt.timedelta(minutes=2)
    renewed = handshake(context, f"api.{DOMAIN}", issuer.ca_file)
    assert renewed.serial_number != first.serial_number

    live_cert.write_text("-----BEGIN CERTIFICATE-----\nnot base64\n")  # a half-written one
    clock.now += dt.timedelta(minutes=2)
    kept = handshake(context, f"api.{DOMAIN}", issuer.ca_file)
    assert kept.serial_number == renewed.serial_number


def test_a_ca_made_for_another_domain_is_refused_with_what_to_do(tmp_path: Path) -> None:
    ServerTLS(_server(), tmp_path).prepare()
    other = ServerConfig(domain="sandboxes.example.org", tls=TlsConfig(mode="local-ca"))
    with pytest.raises(ConfigError, match=r"remove ca\.key and ca\.pem"):
        ServerTLS(other, tmp_path)


def test_files_mode_needs_both_files_and_the_domain_carries_the_port() -> None:
    with pytest.raises(ValueError, match="cert_file and key_file"):
        TlsConfig(mode="files", cert_file=Path("/x.pem"))
    with pytest.raises(ValueError, match="only with mode: files"):
        TlsConfig(mode="local-ca", key_file=Path("/x.key"))
    assert ServerConfig(domain=DOMAIN, port=7788).sandbox_domain == DOMAIN
    https = ServerConfig(domain=DOMAIN, port=7788, tls=TlsConfig(mode="local-ca"))
    assert https.sandbox_domain == f"{DOMAIN}:7788"
    behind = https.model_copy(update={"public_port": 443})
    assert behind.sandbox_domain == DOMAIN
