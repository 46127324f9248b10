"""``sandgate env``: the environment an E2B SDK needs to talk to this server."""

from __future__ import annotations

import os
import shlex

from sandgate.cli._common import ConfigOption, friendly_errors, load, open_store


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
    url = f"http://{host}:{cfg.server.port}"
    for name, value in (
        ("E2B_API_KEY", key),
        ("E2B_API_URL", url),
        ("E2B_SANDBOX_URL", url),
        ("E2B_VOLUME_API_URL", url),
        ("E2B_DOMAIN", cfg.server.domain),
    ):
        print(f"export {name}={shlex.quote(value)}")
