"""Who may do what: API keys (control plane) and per-sandbox access tokens (data plane)."""

from sandgate.access._keys import (
    SCOPES,
    Principal,
    authenticate_api_key,
    authenticate_key_hash,
    create_api_key,
    hash_secret,
    new_access_token,
    tokens_equal,
    traffic_token,
)

__all__ = [
    "SCOPES",
    "Principal",
    "authenticate_api_key",
    "authenticate_key_hash",
    "create_api_key",
    "hash_secret",
    "new_access_token",
    "tokens_equal",
    "traffic_token",
]
