"""HTTPS on the server's one port: the certificate files, the SSL context the ASGI server uses,
and keeping that certificate fresh while the server runs.

Both modes come down to a certificate chain and a key in files: ``local-ca`` issues them from
the ``LocalCA`` (``<home>/tls/server.pem``, ``server.key``), ``files`` names the operator's own
(a real wildcard certificate). The context the ASGI server listens with has an SNI callback
that, at most once a minute, checks whether the files are due (``local-ca``: less than
``LEAF_RENEW_BEFORE`` left; ``files``: changed on disk, as after a renewal) and hands every
new handshake a context with the current certificate; connections already open keep theirs.
A reload that fails (a half-written renewal) keeps the previous certificate and is retried.

ALPN offers HTTP/1.1 only (the server speaks no HTTP/2), so clients that prefer h2 (the E2B
SDKs with ``E2B_HTTP_VERSION=2``) settle on HTTP/1.1.
"""

from __future__ import annotations

import datetime as dt
import ssl
from collections.abc import Callable
from pathlib import Path
from typing import Final

import structlog
from cryptography import x509

from sandgate.config import ServerConfig
from sandgate.errors import ConfigError
from sandgate.tls._ca import LEAF_RENEW_BEFORE, LocalCA, ServerNames

__all__ = ["ServerTLS", "client_trust_env"]

log = structlog.get_logger("sandgate.tls")

CHECK_EVERY: Final = dt.timedelta(minutes=1)
_ALPN: Final = ["http/1.1"]

Clock = Callable[[], dt.datetime]


def _utcnow() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


class ServerTLS:
    """The server's certificate and the contexts that present it."""

    def __init__(self, server: ServerConfig, home: Path, *, clock: Clock = _utcnow) -> None:
        if not server.tls.enabled:
            raise ValueError("TLS is off in this configuration")
        self._clock = clock
        self._directory = home / "tls"
        self.ca: LocalCA | None = None
        if server.tls.mode == "local-ca":
            self.ca = LocalCA(self._directory, ServerNames(server.domain, server.host))
            self.cert_file = self._directory / "server.pem"
            self.key_file = self._directory / "server.key"
        elif server.tls.cert_file is not None and server.tls.key_file is not None:
            self.cert_file = server.tls.cert_file.expanduser()
            self.key_file = server.tls.key_file.expanduser()
        else:
            raise ConfigError("server.tls mode files needs cert_file and key_file")
        self._check_at = self._clock()
        self._loaded_stamp: tuple[float, float] | None = None
        self._current: ssl.SSLContext | None = None

    @property
    def ca_file(self) -> Path | None:
        """The CA clients must trust (``local-ca`` only)."""
        return self.ca.cert_path if self.ca is not None else None

    @property
    def bundle_file(self) -> Path | None:
        """System roots plus the CA (``local-ca`` only): for ``SSL_CERT_FILE``."""
        return self._directory / "ca-bundle.pem" if self.ca is not None else None

    def prepare(self) -> None:
        """Makes sure the certificate files exist and are fresh (``local-ca``: issues them,
        writes the trust bundle); raises ``ConfigError`` for files that cannot be used."""
        if self.ca is not None and self.bundle_file is not None:
            self.ca.write_bundle(self.bundle_file)
        self._refresh()

    def context(self) -> ssl.SSLContext:
        """The context to listen with: presents the current certificate to every new
        handshake, renewing or reloading it first when it is due."""
        if self._current is None:
            self.prepare()
        base = self._new_context()
        base.sni_callback = self._on_hello
        return base

    def not_after(self) -> dt.datetime:
        """When the certificate now presented expires."""
        cert = x509.load_pem_x509_certificate(self.cert_file.read_bytes())
        return cert.not_valid_after_utc

    def _on_hello(
        self, connection: ssl.SSLObject | ssl.SSLSocket, _name: str | None, _base: ssl.SSLContext
    ) -> None:
        if self._clock() >= self._check_at:
            try:
                self._refresh()
            except (OSError, ssl.SSLError, ValueError, ConfigError) as exc:
                # SECURITY: never a half-loaded context: the previous one stays in use.
                log.warning("tls.reload_failed", error=str(exc), cert_file=str(self.cert_file))
        if self._current is not None:
            connection.context = self._current

    def _refresh(self) -> None:
        now = self._clock()
        self._check_at = now + CHECK_EVERY
        if self.ca is not None and self._leaf_due(now):
            not_after = self.ca.issue(self.cert_file, self.key_file, now)
            log.info("tls.certificate_issued", not_after=not_after.isoformat())
        stamp = self._stamp()
        if self._current is not None and stamp == self._loaded_stamp:
            return
        self._current = self._new_context()
        self._loaded_stamp = stamp
        if self._loaded_stamp is not None:
            log.info("tls.certificate_loaded", cert_file=str(self.cert_file))

    def _leaf_due(self, now: dt.datetime) -> bool:
        if not (self.cert_file.exists() and self.key_file.exists()):
            return True
        try:
            return self.not_after() - now < LEAF_RENEW_BEFORE
        except ValueError:
            return True

    def _stamp(self) -> tuple[float, float]:
        try:
            return self.cert_file.stat().st_mtime, self.key_file.stat().st_mtime
        except OSError as exc:
            raise ConfigError(f"cannot read the TLS certificate or key: {exc}") from exc

    def _new_context(self) -> ssl.SSLContext:
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.minimum_version = ssl.TLSVersion.TLSv1_2
        context.set_alpn_protocols(_ALPN)
        try:
            context.load_cert_chain(str(self.cert_file), str(self.key_file))
        except (OSError, ssl.SSLError) as exc:
            raise ConfigError(
                f"cannot use the TLS certificate {self.cert_file} with key {self.key_file}: "
                f"{exc}; give a PEM chain (server certificate first) and its PEM key"
            ) from exc
        return context


def client_trust_env(tls: ServerTLS) -> dict[str, str]:
    """The variables that make common clients trust the local CA (empty for ``files``, whose
    certificate clients already trust): Python's ssl, httpx, requests and the E2B SDKs read
    the bundle; Node adds ``NODE_EXTRA_CA_CERTS`` to its own roots."""
    if tls.ca_file is None or tls.bundle_file is None:
        return {}
    return {
        "SSL_CERT_FILE": str(tls.bundle_file),
        "REQUESTS_CA_BUNDLE": str(tls.bundle_file),
        "NODE_EXTRA_CA_CERTS": str(tls.ca_file),
    }
