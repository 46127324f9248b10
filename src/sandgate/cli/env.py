"""``sandgate env``: the environment an E2B SDK needs to talk to this server (over TLS, the
trust settings for the local CA too)."""

from __future__ import annotations

import os
import shlex
import socket

from sandgate.cli._common import ConfigOption, err_console, friendly_errors, load, open_store
from sandgate.config import Config


@friendly_errors
def env(config: ConfigOption = None) -> None:
    """Prints `export` lines: use `eval "$(sandgate env)"`. Creates a default API key on
    first use and keeps it in $SANDGATE_HOME/default-api-key (mode 0600)."""
    from sandgate.access import authenticate_api_key, create_api_key
    from sandgate.errors import Unauthenticated

    cfg = load(config)
    store = open_store(cfg)
    key_file = cfg.home_dir / "default-api-key"
    key = key_file.read_text().strip() if key_file.exists() else ""
    try:
        authenticate_api_key(store, key)
    except Unauthenticated:
        _, key = create_api_key(store, "default", "default")
        fd = os.open(key_file, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as handle:
            handle.write(key + "\n")
    host = cfg.server.host
    if host in ("0.0.0.0", "::", ""):
        host = "127.0.0.1"
    if not cfg.server.tls.enabled:
        url = f"http://{host}:{cfg.server.port}"
        for name, value in (
            ("E2B_API_KEY", key),
            ("E2B_API_URL", url),
            ("E2B_SANDBOX_URL", url),
            ("E2B_VOLUME_API_URL", url),
            ("E2B_DOMAIN", cfg.server.domain),
        ):
            print(f"export {name}={shlex.quote(value)}")
        return
    _print_https(cfg, key, host)


def _print_https(cfg: Config, key: str, host: str) -> None:
    """Over TLS: the E2B host scheme (``api.<domain>``, ``<port>-<id>.<domain>``) through
    ``E2B_DOMAIN``, what makes clients trust the local CA, and the API by address where the
    certificate names it (the local CA's does), so SDK 2.x needs no DNS for its own calls."""
    from sandgate.tls import ServerTLS, client_trust_env

    server_tls = ServerTLS(cfg.server, cfg.home_dir)
    server_tls.prepare()
    domain = cfg.server.sandbox_domain
    port = cfg.server.public_port or cfg.server.port
    variables = {"E2B_API_KEY": key, "E2B_DOMAIN": domain}
    if server_tls.ca is not None:
        literal = f"[{host}]" if ":" in host else host
        address = f"https://{literal}:{port}"
        variables |= {
            "E2B_API_URL": address,
            "E2B_SANDBOX_URL": address,
            "E2B_VOLUME_API_URL": address,
        }
    else:
        variables["E2B_API_URL"] = variables["E2B_VOLUME_API_URL"] = f"https://api.{domain}"
    variables |= client_trust_env(server_tls)
    for name, value in variables.items():
        print(f"export {name}={shlex.quote(value)}")
    if "E2B_SANDBOX_URL" not in variables:
        print("unset E2B_SANDBOX_URL")
    bare = cfg.server.domain
    print(
        f"# SDK 1.x (e2b-mcp-server), get_host() and code-interpreter 2.8 reach "
        f"https://<port>-<id>.{domain}: *.{bare} must resolve to this server"
    )
    if not _resolves(f"api.{bare}"):
        err_console.print(
            f"[yellow]Note[/]: api.{bare} does not resolve on this machine; clients that use "
            f"the E2B host scheme need *.{bare} to name this server (wildcard DNS; for "
            '*.localhost on glibc: the myhostname NSS module). docs/operations.md, "HTTPS".'
        )


def _resolves(name: str) -> bool:
    try:
        socket.getaddrinfo(name, 443, proto=socket.IPPROTO_TCP)
    except (OSError, UnicodeError):
        return False
    return True
