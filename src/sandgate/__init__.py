"""Sandgate: a self-hosted execution layer for AI agents."""

__version__ = "0.1.0"
__all__ = ["__version__"]
