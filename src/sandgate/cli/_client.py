"""Talking to the running server's HTTP API from the CLI (``sandgate workflows``).

The server is ``$SANDGATE_URL`` if set, else the one ``sandgate serve`` last started on this
home (it writes ``$SANDGATE_HOME/server-url``), else the one the config names; the key is
``$SANDGATE_API_KEY`` if set, else the default key ``sandgate env`` keeps in
``$SANDGATE_HOME/default-api-key`` (created on first use, mode 0600). Errors come back as
``SandgateError``s with the server's code and message.
"""

from __future__ import annotations

import os
import ssl
from typing import Any

import httpx

from sandgate.config import Config
from sandgate.errors import RuntimeUnavailable, SandgateError

__all__ = ["ServerClient", "default_api_key", "server_url"]


def server_url(config: Config) -> str:
    host = config.server.host
    if host in ("0.0.0.0", "::", ""):
        host = "127.0.0.1"
    if ":" in host:
        host = f"[{host}]"
    scheme = "https" if config.server.tls.enabled else "http"
    return f"{scheme}://{host}:{config.server.port}"


def _verify(config: Config, url: str) -> ssl.SSLContext | str | bool:
    """What an HTTPS connection to the server trusts: the local CA's bundle when the server
    made one (``serve --tls``), else the system's roots. A plain-HTTP server gets a context
    that trusts nothing: httpx would otherwise load a CA bundle it never uses (~80 ms of every
    command), and no request of this client leaves the server's URL (no redirects)."""
    from sandgate.tls import ServerTLS

    if not url.startswith("https:"):
        return ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    if not config.server.tls.enabled:
        return True
    bundle = ServerTLS(config.server, config.home_dir).bundle_file
    return str(bundle) if bundle is not None and bundle.exists() else True


def default_api_key(config: Config) -> str:
    """The default API key (``sandgate env``'s), created if missing or revoked."""
    from sandgate.access import authenticate_api_key, create_api_key
    from sandgate.cli._common import open_store
    from sandgate.errors import Unauthenticated

    store = open_store(config)
    key_file = config.home_dir / "default-api-key"
    key = key_file.read_text().strip() if key_file.exists() else ""
    try:
        authenticate_api_key(store, key)
    except Unauthenticated:
        _, key = create_api_key(store, "default", "default")
        fd = os.open(key_file, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as handle:
            handle.write(key + "\n")
    finally:
        store.close()
    return key


def _running_server(config: Config) -> str:
    if os.environ.get("SANDGATE_URL"):
        return os.environ["SANDGATE_URL"].rstrip("/")
    try:
        return (config.home_dir / "server-url").read_text(encoding="utf-8").strip()
    except OSError:
        return server_url(config)


class ServerClient:
    def __init__(self, config: Config) -> None:
        self.url = _running_server(config)
        key = os.environ.get("SANDGATE_API_KEY") or default_api_key(config)
        self._http = httpx.Client(
            base_url=self.url,
            headers={"X-API-Key": key},
            timeout=30.0,
            trust_env=False,
            verify=_verify(config, self.url),
        )

    def request(self, method: str, path: str, **kwargs: Any) -> Any:
        try:
            response = self._http.request(method, path, **kwargs)
        except httpx.TransportError:
            raise RuntimeUnavailable(
                f"no Sandgate server answers at {self.url}; start it with `sandgate serve`"
            ) from None
        if response.status_code >= 400:
            try:
                body = response.json()
            except ValueError:
                body = {}
            error = SandgateError(str(body.get("message") or response.text[:300]))
            error.code = str(body.get("error_code") or response.status_code)
            error.status = response.status_code
            raise error
        return response.json() if response.content else None

    def stream(self, path: str) -> Any:
        """The lines of a streaming GET (SSE)."""
        with self._http.stream("GET", path, timeout=None) as response:
            yield from response.iter_lines()
