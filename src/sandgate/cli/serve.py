"""``sandgate serve``: build what is missing, then serve everything on one port."""

from __future__ import annotations

from typing import Annotated

import typer

from sandgate.cli._common import ConfigOption, console, err_console, friendly_errors, load


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
) -> None:
    """Runs the Sandgate server in the foreground (Ctrl-C stops it; sandboxes keep running
    and are found again on the next start)."""
    import structlog
    import uvicorn

    from sandgate.api.app import create_app
    from sandgate.cli._bootstrap import ensure_shipped_templates
    from sandgate.config import PACKAGE_REGISTRIES, PRESETS
    from sandgate.logs import configure_logging

    cfg = load(config)
    overrides = {k: v for k, v in {"host": host, "port": port}.items() if v is not None}
    if overrides:
        cfg = cfg.model_copy(update={"server": cfg.server.model_copy(update=overrides)})
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
    application = create_app(cfg)
    kind = application.runtime.name
    refusal = application.floors.refusal(kind)
    if refusal is not None:
        err_console.print(f"[bold red]No sandbox will start[/]: {refusal}")
    for finding in application.floors.accepted(kind):
        err_console.print(
            f"[bold yellow]Accepted risk[/] (runtime.accept_below_floor): {finding.problem()}"
        )
    ensure_shipped_templates(cfg, application.store, build=cfg.templates.build_on_start)
    # `sandgate env` reads the same config; flags given here must reach it as variables.
    flags = "".join(f"SANDGATE_SERVER__{k.upper()}={v} " for k, v in overrides.items())
    console.print(
        f"Sandgate listening on http://{cfg.server.host}:{cfg.server.port} "
        f"(runtime {application.runtime.name}, data in {cfg.home_dir}).\n"
        f'Client setup: eval "$({flags}uv run sandgate env)"'
    )
    # The CLI's API commands (`sandgate workflows ...`) find this server here, flags included.
    from sandgate.cli._client import server_url

    (cfg.home_dir / "server-url").write_text(server_url(cfg) + "\n", encoding="utf-8")
    uvicorn.run(
        application.asgi,
        host=cfg.server.host,
        port=cfg.server.port,
        log_level="warning",
        lifespan="on",
        http="httptools",
        loop="uvloop",
        timeout_graceful_shutdown=3,
        # Longer than any client's idle timeout (undici 4 s, httpx 5 s), so a client never
        # sends a request on a connection the server is closing at that very moment.
        timeout_keep_alive=75,
    )
