"""The ``sandgate`` command line: one typer app, one module per command group."""

from sandgate.cli._app import app

__all__ = ["app"]
