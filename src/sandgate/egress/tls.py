"""TLS for the egress proxy: the per-install CA, the certificates it mints for bound hosts,
and the context the proxy uses to reach those hosts itself.

Only hosts that a secret is bound to are ever intercepted (``placeholders``); every other
tunnel is spliced byte for byte and never sees this CA. Sandboxes that have bound secrets are
told to trust the CA through the usual variables (``CA_ENV``); nothing else trusts it.

Trust: ``ca.key`` (0600, in ``<home>/egress``) can impersonate any host to a sandbox that
trusts it, so it never leaves the gateway; its certificate is limited to signing end-entity
certificates (``pathlen=0``). Minted certificates name exactly one host and live a week.
The client's SNI is checked against the CONNECT host before the handshake starts (the
tunnel reads it with ``clienthello``), so a minted certificate is only ever shown to a client
that asked for its host.
"""

from __future__ import annotations

import datetime as dt
import secrets
import ssl
import tempfile
import threading
from collections import OrderedDict
from pathlib import Path
from typing import Final

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from sandgate.tls import key_pem, mint_ca, write_private, write_public

__all__ = ["CA_ENV", "EgressCA", "upstream_context"]

_CA_DAYS: Final = 3650
_LEAF_LIFETIME: Final = dt.timedelta(days=7)
_LEAF_REFRESH: Final = dt.timedelta(days=1)
_CACHE: Final = 256
_ALPN: Final = ["http/1.1"]

#: Variables that point common clients at a bundle with the CA added (paths in the sandbox).
CA_ENV: Final = {
    "SSL_CERT_FILE": "{bundle}",
    "REQUESTS_CA_BUNDLE": "{bundle}",
    "CURL_CA_BUNDLE": "{bundle}",
    "GIT_SSL_CAINFO": "{bundle}",
    "PIP_CERT": "{bundle}",
    "NODE_EXTRA_CA_CERTS": "{ca}",
    "DENO_CERT": "{ca}",
}


def upstream_context(extra_ca: Path | None) -> ssl.SSLContext:
    """Verifying client context for the proxy's own connections to bound hosts."""
    context = ssl.create_default_context()
    if extra_ca is not None:
        context.load_verify_locations(cafile=str(extra_ca))
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    context.set_alpn_protocols(_ALPN)
    return context


class EgressCA:
    """Loads (or creates, first run) the CA in ``directory`` and mints server contexts."""

    def __init__(self, directory: Path) -> None:
        self._dir = directory
        self._key, self._cert = self._load_or_create()
        self.pem: bytes = self._cert.public_bytes(serialization.Encoding.PEM)
        self._leaf_key = ec.generate_private_key(ec.SECP256R1())
        self._contexts: OrderedDict[str, tuple[dt.datetime, ssl.SSLContext]] = OrderedDict()
        self._lock = threading.Lock()

    def server_context(self, host: str) -> ssl.SSLContext:
        """A server context presenting a certificate for ``host`` (a canonical name)."""
        now = dt.datetime.now(dt.UTC)
        with self._lock:
            cached = self._contexts.get(host)
            if cached is not None and now - cached[0] < _LEAF_REFRESH:
                self._contexts.move_to_end(host)
                return cached[1]
            context = self._mint(host, now)
            self._contexts[host] = (now, context)
            while len(self._contexts) > _CACHE:
                self._contexts.popitem(last=False)
            return context

    def _mint(self, host: str, now: dt.datetime) -> ssl.SSLContext:
        name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, host)])
        cert = (
            x509.CertificateBuilder()
            .subject_name(name)
            .issuer_name(self._cert.subject)
            .public_key(self._leaf_key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - dt.timedelta(hours=1))
            .not_valid_after(min(now + _LEAF_LIFETIME, self._cert.not_valid_after_utc))
            .add_extension(x509.SubjectAlternativeName([x509.DNSName(host)]), critical=False)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(
                x509.ExtendedKeyUsage([x509.oid.ExtendedKeyUsageOID.SERVER_AUTH]), critical=False
            )
            .add_extension(
                x509.AuthorityKeyIdentifier.from_issuer_public_key(self._key.public_key()),
                critical=False,
            )
            .sign(self._key, hashes.SHA256())
        )
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.minimum_version = ssl.TLSVersion.TLSv1_2
        context.set_alpn_protocols(_ALPN)
        chain = cert.public_bytes(serialization.Encoding.PEM) + self.pem
        key = self._leaf_key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
        # ssl loads certificates only from files: a private directory, removed at once.
        with tempfile.TemporaryDirectory(dir=self._dir) as scratch:
            cert_path, key_path = Path(scratch, "cert.pem"), Path(scratch, "key.pem")
            cert_path.write_bytes(chain)
            key_path.write_bytes(key)
            context.load_cert_chain(str(cert_path), str(key_path))
        return context

    def _load_or_create(self) -> tuple[ec.EllipticCurvePrivateKey, x509.Certificate]:
        key_path, cert_path = self._dir / "ca.key", self._dir / "ca.pem"
        if key_path.exists() and cert_path.exists():
            key = serialization.load_pem_private_key(key_path.read_bytes(), password=None)
            if not isinstance(key, ec.EllipticCurvePrivateKey):
                raise ValueError(f"{key_path} is not an EC private key; remove it to regenerate")
            return key, x509.load_pem_x509_certificate(cert_path.read_bytes())
        self._dir.mkdir(parents=True, exist_ok=True, mode=0o700)
        key, cert = mint_ca(
            f"Sandgate egress CA {secrets.token_hex(4)}", dt.timedelta(days=_CA_DAYS)
        )
        write_private(key_path, key_pem(key))
        write_public(cert_path, cert.public_bytes(serialization.Encoding.PEM))
        return key, cert
