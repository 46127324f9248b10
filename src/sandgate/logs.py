"""Structured logging: key=value lines for people, JSON lines for machines."""

from __future__ import annotations

import logging
import sys

import structlog


def configure_logging(level: str = "info", *, json_logs: bool = False) -> None:
    """Routes structlog and the stdlib (uvicorn, alembic) to stderr at ``level``."""
    numeric = getattr(logging, level.upper(), logging.INFO)
    logging.basicConfig(stream=sys.stderr, level=numeric, format="%(message)s", force=True)
    for noisy in ("alembic", "docker", "urllib3"):
        logging.getLogger(noisy).setLevel(max(numeric, logging.WARNING))
    renderer: structlog.typing.Processor = (
        structlog.processors.JSONRenderer()
        if json_logs
        else structlog.dev.ConsoleRenderer(colors=False)
    )
    structlog.configure(
        processors=[
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            renderer,
        ],
        wrapper_class=structlog.make_filtering_bound_logger(numeric),
        logger_factory=structlog.PrintLoggerFactory(sys.stderr),
        cache_logger_on_first_use=True,
    )
