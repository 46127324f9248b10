"""HTTPS for the server's one port (``server.tls``): a local CA or the operator's own
certificate, kept fresh while the server runs."""

from sandgate.tls._ca import (
    LEAF_LIFETIME,
    LEAF_RENEW_BEFORE,
    LocalCA,
    ServerNames,
    write_private,
)
from sandgate.tls._server import ServerTLS, client_trust_env

__all__ = [
    "LEAF_LIFETIME",
    "LEAF_RENEW_BEFORE",
    "LocalCA",
    "ServerNames",
    "ServerTLS",
    "client_trust_env",
    "write_private",
]
