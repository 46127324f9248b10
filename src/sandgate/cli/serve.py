"""``sandgate serve``: build what is missing, then serve everything on one port."""

from __future__ import annotations

import contextlib
import resource
from typing import TYPE_CHECKING, Annotated

import typer

from sandgate.cli._common import ConfigOption, console, err_console, friendly_errors, load

if TYPE_CHECKING:
    from sandgate.tls import ServerTLS


@friendly_errors
def serve(
    host: Annotated[str | None, typer.Option(help="Address to listen on.")] = None,
    port: Annotated[int | None, typer.Option(help="Port to listen on.")] = None,
    config: ConfigOption = None,
    allow_package_registries: Annotated[
        bool,
        typer.Option(
            "--allow-package-registries",
            help="Let every sandbox reach PyPI, npm and Debian's archive (the egress presets "
            "pypi, npm and debian), as if egress.allow listed them.",
        ),
    ] = False,
    tls: Annotated[
        bool,
        typer.Option(
            "--tls",
            help="Serve HTTPS (the API and every <port>-<id>.<domain> host) with a local CA "
            "made in $SANDGATE_HOME/tls, unless the config names certificate files "
            "(server.tls.mode: files).",
        ),
    ] = False,
) -> None:
    """Runs the Sandgate server in the foreground (Ctrl-C stops it; sandboxes keep running
    and are found again on the next start)."""
    import structlog
    import uvicorn

    from sandgate.api.app import create_app
    from sandgate.api.ws_relay import MAX_MESSAGE_BYTES
    from sandgate.cli._bootstrap import ensure_shipped_templates
    from sandgate.config import PACKAGE_REGISTRIES, PRESETS
    from sandgate.logs import configure_logging
    from sandgate.tls import ServerTLS

    cfg = load(config)
    overrides = {k: v for k, v in {"host": host, "port": port}.items() if v is not None}
    if overrides:
        cfg = cfg.model_copy(update={"server": cfg.server.model_copy(update=overrides)})
    flags = "".join(f"SANDGATE_SERVER__{k.upper()}={v} " for k, v in overrides.items())
    if tls and not cfg.server.tls.enabled:
        tls_config = cfg.server.tls.model_copy(update={"mode": "local-ca"})
        server_config = cfg.server.model_copy(update={"tls": tls_config})
        cfg = cfg.model_copy(update={"server": server_config})
        flags += "SANDGATE_SERVER__TLS__MODE=local-ca "
    configure_logging(cfg.logging.level, json_logs=cfg.logging.json_logs)
    if allow_package_registries:
        cfg = cfg.model_copy(update={"egress": cfg.egress.with_presets(PACKAGE_REGISTRIES)})
        hosts = sorted({h for name in PACKAGE_REGISTRIES for h, _ in PRESETS[name]})
        structlog.get_logger("sandgate.egress").info(
            "egress.package_registries_allowed", presets=list(PACKAGE_REGISTRIES), hosts=hosts
        )
        console.print(
            f"Egress: every sandbox may reach the package registries "
            f"({', '.join(PACKAGE_REGISTRIES)}: {', '.join(hosts)})."
        )
    raise_open_file_limit()
    application = create_app(cfg)
    kind = application.runtime.name
    refusal = application.floors.refusal(kind)
    if refusal is not None:
        err_console.print(f"[bold red]No sandbox will start[/]: {refusal}")
    for finding in application.floors.accepted(kind):
        err_console.print(
            f"[bold yellow]Accepted risk[/] (runtime.accept_below_floor): {finding.problem()}"
        )
    if cfg.sandbox.allow_public_traffic:
        err_console.print(
            "[bold yellow]Public ports[/] (sandbox.allow_public_traffic): sandboxes created "
            "without network.allowPublicTraffic serve their ports, the code interpreter's "
            "included, to anyone who reaches this server and knows the sandbox id."
        )
    ensure_shipped_templates(cfg, application.store, build=cfg.templates.build_on_start)
    server_tls = ServerTLS(cfg.server, cfg.home_dir) if cfg.server.tls.enabled else None
    if server_tls is not None:
        server_tls.prepare()
        print_trust(server_tls, cfg.server.domain, cfg.server.sandbox_domain)
    scheme = "https" if server_tls is not None else "http"
    # `sandgate env` reads the same config; flags given here must reach it as variables.
    console.print(
        f"Sandgate listening on {scheme}://{cfg.server.host}:{cfg.server.port} "
        f"(runtime {application.runtime.name}, data in {cfg.home_dir}).\n"
        f'Client setup: eval "$({flags}uv run sandgate env)"\n'
        f"Web console: {scheme}://{cfg.server.host}:{cfg.server.port}/ui (sign in with an API key)"
    )
    # The CLI's API commands (`sandgate workflows ...`) find this server here, flags included.
    from sandgate.cli._client import server_url

    (cfg.home_dir / "server-url").write_text(server_url(cfg) + "\n", encoding="utf-8")
    asgi_config = uvicorn.Config(
        application.asgi,
        host=cfg.server.host,
        port=cfg.server.port,
        log_level="warning",
        lifespan="on",
        http="httptools",
        loop="uvloop",
        ws_max_size=MAX_MESSAGE_BYTES,
        timeout_graceful_shutdown=3,
        # Longer than any client's idle timeout (undici 4 s, httpx 5 s), so a client never
        # sends a request on a connection the server is closing at that very moment.
        timeout_keep_alive=75,
        ssl_certfile=str(server_tls.cert_file) if server_tls else None,
        ssl_keyfile=str(server_tls.key_file) if server_tls else None,
    )
    asgi_config.load()
    if server_tls is not None:
        # Ours, not uvicorn's: it renews (or reloads) the certificate while serving.
        asgi_config.ssl = server_tls.context()
    uvicorn.Server(asgi_config).run()


def print_trust(server_tls: ServerTLS, domain: str, reached_as: str) -> None:
    """Says which certificate is served and, for the local CA, how clients trust it;
    ``reached_as`` is the domain with the port clients use (``sandbox_domain``)."""
    names = f"https://api.{reached_as}, https://<port>-<sandbox id>.{reached_as}"
    if server_tls.ca is None:
        console.print(f"HTTPS with {server_tls.cert_file} for {names}.")
        return
    console.print(
        f"HTTPS with a local CA: {server_tls.ca_file} (SHA-256 {server_tls.ca.fingerprint}),\n"
        f"  valid only for {domain}, its subdomains, localhost and loopback addresses.\n"
        f"  It signs the certificate for {names}.\n"
        f"  Trust it per shell with `sandgate env` (SSL_CERT_FILE/REQUESTS_CA_BUNDLE="
        f"{server_tls.bundle_file},\n  NODE_EXTRA_CA_CERTS={server_tls.ca_file}), or on this "
        "machine (Debian/Ubuntu):\n"
        f"  cp {server_tls.ca_file} /usr/local/share/ca-certificates/sandgate.crt && "
        "update-ca-certificates"
    )


def raise_open_file_limit() -> None:
    """Raises the soft limit on open files to the hard one, as servers do. The gateway holds
    a few descriptors per sandbox (its guest connections, its user namespace), and the soft
    limit many systems start services with (1024) would end creates near 300 sandboxes."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    wanted = hard if hard != resource.RLIM_INFINITY else 1 << 20
    if soft != resource.RLIM_INFINITY and soft < wanted:
        with contextlib.suppress(ValueError, OSError):
            resource.setrlimit(resource.RLIMIT_NOFILE, (wanted, hard))
