"""The local CA behind ``server.tls.mode: local-ca``: made once per home, it signs the server's
own certificate (``<domain>``, ``*.<domain>``, ``localhost``, loopback addresses).

Trust: ``ca.key`` (0600) can sign certificates that every client trusting ``ca.pem`` accepts,
so the CA is **name-constrained** (RFC 5280, critical) to exactly the names it signs for: the
sandbox domain and its subdomains, ``localhost`` and the loopback ranges. A client that trusts
it (even system-wide) cannot be fooled by it about any other site, even if the key leaks. The
key never leaves the gateway's home. The server certificate lives ``LEAF_LIFETIME`` and is
made anew once less than ``LEAF_RENEW_BEFORE`` of it remains (``ServerTLS`` checks).
"""

from __future__ import annotations

import datetime as dt
import ipaddress
import os
import secrets
import ssl
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from sandgate.errors import ConfigError

__all__ = ["LEAF_LIFETIME", "LEAF_RENEW_BEFORE", "LocalCA", "ServerNames"]

CA_LIFETIME: Final = dt.timedelta(days=3650)
LEAF_LIFETIME: Final = dt.timedelta(days=30)
LEAF_RENEW_BEFORE: Final = dt.timedelta(days=10)
_LOOPBACK: Final = (ipaddress.ip_network("127.0.0.0/8"), ipaddress.ip_network("::1/128"))

IpAddress = ipaddress.IPv4Address | ipaddress.IPv6Address


@dataclass(frozen=True)
class ServerNames:
    """What the server certificate names: ``domain`` (with ``*.domain``), ``localhost`` and
    the loopback addresses, plus ``host`` if it is a specific IP address."""

    domain: str
    host: str = "127.0.0.1"

    @property
    def dns(self) -> list[str]:
        return [self.domain, f"*.{self.domain}", "localhost"]

    @property
    def ips(self) -> list[IpAddress]:
        found: list[IpAddress] = [
            ipaddress.ip_address("127.0.0.1"),
            ipaddress.ip_address("::1"),
        ]
        try:
            address = ipaddress.ip_address(self.host)
        except ValueError:
            return found
        if not address.is_unspecified and address not in found:
            found.append(address)
        return found

    def permitted(self) -> list[x509.GeneralName]:
        """The CA's name constraints: these names and everything below them."""
        networks = list(_LOOPBACK)
        for address in self.ips:
            if not any(address in network for network in networks):
                networks.append(ipaddress.ip_network(address))
        return [
            x509.DNSName(self.domain),
            x509.DNSName("localhost"),
            *(x509.IPAddress(network) for network in networks),
        ]


class LocalCA:
    """Loads (or makes, on first use) the CA in ``directory`` and issues server certificates."""

    def __init__(self, directory: Path, names: ServerNames) -> None:
        self.directory = directory
        self.names = names
        self.key_path = directory / "ca.key"
        self.cert_path = directory / "ca.pem"
        self._key, self._cert = self._load_or_create()
        self.pem = self._cert.public_bytes(serialization.Encoding.PEM)

    @property
    def fingerprint(self) -> str:
        """SHA-256 of the CA certificate, as ``AB:CD:…`` (to check what a client trusts)."""
        return self._cert.fingerprint(hashes.SHA256()).hex(":").upper()

    @property
    def not_after(self) -> dt.datetime:
        return self._cert.not_valid_after_utc

    def issue(self, cert_path: Path, key_path: Path, now: dt.datetime) -> dt.datetime:
        """Writes a fresh server certificate (with the CA after it) and its key (0600);
        returns when the certificate expires."""
        key = ec.generate_private_key(ec.SECP256R1())
        not_after = min(now + LEAF_LIFETIME, self.not_after)
        cert = (
            x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, self.names.domain)]))
            .issuer_name(self._cert.subject)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - dt.timedelta(hours=1))
            .not_valid_after(not_after)
            .add_extension(
                x509.SubjectAlternativeName(
                    [
                        *(x509.DNSName(name) for name in self.names.dns),
                        *(x509.IPAddress(address) for address in self.names.ips),
                    ]
                ),
                critical=False,
            )
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
            .add_extension(
                x509.AuthorityKeyIdentifier.from_issuer_public_key(self._key.public_key()),
                critical=False,
            )
            .sign(self._key, hashes.SHA256())
        )
        write_private(key_path, key_pem(key))
        write_public(cert_path, cert.public_bytes(serialization.Encoding.PEM) + self.pem)
        return not_after

    def write_bundle(self, path: Path) -> None:
        """The system's trusted roots plus this CA: what ``SSL_CERT_FILE`` should name, so a
        shell that trusts Sandgate still trusts every public site."""
        write_public(path, system_roots() + b"\n" + self.pem)

    def _load_or_create(self) -> tuple[ec.EllipticCurvePrivateKey, x509.Certificate]:
        if self.key_path.exists() and self.cert_path.exists():
            key = serialization.load_pem_private_key(self.key_path.read_bytes(), password=None)
            if not isinstance(key, ec.EllipticCurvePrivateKey):
                raise ConfigError(f"{self.key_path} is not an EC private key; remove it")
            cert = x509.load_pem_x509_certificate(self.cert_path.read_bytes())
            self._check_covers(cert)
            return key, cert
        self.directory.mkdir(parents=True, exist_ok=True, mode=0o700)
        key, cert = mint_ca(
            f"Sandgate local CA {secrets.token_hex(4)}",
            CA_LIFETIME,
            x509.NameConstraints(permitted_subtrees=self.names.permitted(), excluded_subtrees=None),
        )
        write_private(self.key_path, key_pem(key))
        write_public(self.cert_path, cert.public_bytes(serialization.Encoding.PEM))
        return key, cert

    def _check_covers(self, cert: x509.Certificate) -> None:
        """Refuses a CA made for another domain: its constraints would make every client
        reject the new certificate."""
        constraints = cert.extensions.get_extension_for_class(x509.NameConstraints).value
        permitted = constraints.permitted_subtrees or []
        dns = {name.value for name in permitted if isinstance(name, x509.DNSName)}
        if self.names.domain not in dns:
            raise ConfigError(
                f"the local CA in {self.directory} was made for {sorted(dns)} and may not sign "
                f"for {self.names.domain}: remove ca.key and ca.pem there to make a new one "
                "(clients must then trust the new ca.pem)"
            )


def system_roots() -> bytes:
    """The PEM roots this machine trusts (OpenSSL's default file), or certifi's."""
    paths = ssl.get_default_verify_paths()
    for candidate in (paths.cafile, paths.openssl_cafile):
        if candidate and Path(candidate).is_file():
            return Path(candidate).read_bytes()
    import certifi

    return Path(certifi.where()).read_bytes()


def write_private(path: Path, data: bytes) -> None:
    """Writes ``data`` to ``path`` atomically, readable by its owner only (0600)."""
    temp = path.with_name(f".{path.name}.tmp")
    fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as file:
        file.write(data)
        file.flush()
        os.fsync(file.fileno())
    temp.replace(path)


def write_public(path: Path, data: bytes) -> None:
    """Writes ``data`` to ``path`` atomically (0644: certificates are public)."""
    temp = path.with_name(f".{path.name}.tmp")
    fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    with os.fdopen(fd, "wb") as file:
        file.write(data)
        file.flush()
        os.fsync(file.fileno())
    temp.replace(path)


def mint_ca(
    common_name: str, lifetime: dt.timedelta, constraints: x509.NameConstraints | None = None
) -> tuple[ec.EllipticCurvePrivateKey, x509.Certificate]:
    """A new self-signed P-256 CA: certificate signing only (path length 0, so it signs leaves
    and never another CA), valid from an hour ago (clock skew) for ``lifetime``, limited to
    ``constraints`` when given. The local HTTPS CA and the egress CA are both made here."""
    key = ec.generate_private_key(ec.SECP256R1())
    now = dt.datetime.now(dt.UTC)
    name = x509.Name(
        [
            x509.NameAttribute(NameOID.ORGANIZATION_NAME, "Sandgate"),
            x509.NameAttribute(NameOID.COMMON_NAME, common_name),
        ]
    )
    builder = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(hours=1))
        .not_valid_after(now + lifetime)
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=True,
                crl_sign=True,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
    )
    if constraints is not None:
        builder = builder.add_extension(constraints, critical=True)
    builder = builder.add_extension(
        x509.SubjectKeyIdentifier.from_public_key(key.public_key()), False
    )
    return key, builder.sign(key, hashes.SHA256())


def key_pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    """``key`` as unencrypted PKCS#8 PEM (written 0600 by ``write_private``)."""
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )
