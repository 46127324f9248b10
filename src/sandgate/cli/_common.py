"""What every command shares: loading config, opening the store, printing errors.

Command modules import heavy dependencies (the store, Docker, the server) inside their
commands, so `sandgate --help` and quick commands start fast.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import wraps
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, ParamSpec, TypeVar

import typer
from rich.console import Console

from sandgate.config import Config, load_config
from sandgate.errors import SandgateError

if TYPE_CHECKING:
    from sandgate.access import Principal
    from sandgate.store import Store

console = Console()
err_console = Console(stderr=True)

P = ParamSpec("P")
R = TypeVar("R")

#: The team in-process commands (run, chat, mcp) act as unless told otherwise: the team of
#: `sandgate env`'s key and of `sandgate keys create`'s default, so an approval they raise can
#: be decided over HTTP with that team's keys.
DEFAULT_TEAM = "default"

TeamOption = Annotated[
    str,
    typer.Option(
        help="The team (by name) to act as; its API keys see and decide what this raises."
    ),
]

ConfigOption = Annotated[
    Path | None,
    typer.Option("--config", "-c", help="Config file (YAML or JSON5).", envvar="SANDGATE_CONFIG"),
]


def load(config_path: Path | None) -> Config:
    return load_config(config_path)


def open_store(config: Config) -> Store:
    from sandgate.store import Store

    config.home_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
    return Store.open(config.store_url)


def local_principal(store: Store, team: str, key_id: str) -> Principal:
    """The principal of an in-process command: ``team`` (created if new) and a key id naming
    the command (``cli``, ``mcp``), which no API key has."""
    import secrets
    from datetime import UTC, datetime

    from sandgate.access import Principal

    row = store.get_or_create_team(team, "team_" + secrets.token_hex(8), datetime.now(UTC))
    return Principal(team_id=row.id, api_key_id=key_id)


def friendly_errors(func: Callable[P, R]) -> Callable[P, R]:
    """Prints a Sandgate error as one clear line and exits 1, instead of a traceback."""

    @wraps(func)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
        try:
            return func(*args, **kwargs)
        except SandgateError as exc:
            err_console.print(f"[bold red]error[/] ({exc.code}): {exc.message}")
            raise typer.Exit(1) from None

    return wrapper
