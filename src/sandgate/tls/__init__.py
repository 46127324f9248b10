"""HTTPS for the server's one port (``server.tls``): a local CA or the operator's own
certificate, kept fresh while the server runs."""

from sandgate.tls._ca import (
    LEAF_LIFETIME,
    LEAF_RENEW_BEFORE,
    LocalCA,
    ServerNames,
    key_pem,
    mint_ca,
    write_private,
    write_public,
)
from sandgate.tls._server import ServerTLS, client_trust_env

__all__ = [
    "LEAF_LIFETIME",
    "LEAF_RENEW_BEFORE",
    "LocalCA",
    "ServerNames",
    "ServerTLS",
    "client_trust_env",
    "key_pem",
    "mint_ca",
    "write_private",
    "write_public",
]
