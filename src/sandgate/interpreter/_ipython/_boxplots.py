"""Remembers the statistics of every box plot drawn, for ``_charts``.

A drawn box plot is only lines and patches; telling it from a line chart, and reading its
quartiles back from the geometry, is guesswork. Every box plot in matplotlib (``boxplot``,
pandas' ``.plot.box()``, seaborn) goes through ``Axes.bxp(bxpstats, ...)``, which gets the
exact statistics, so we wrap ``bxp`` to keep them, and the artists it made, on the axes
(``BOXPLOTS_ATTR``).

matplotlib is not imported here: when it is not loaded yet, a one-shot import hook wraps
``bxp`` right after ``matplotlib.axes`` is first imported.
"""

from __future__ import annotations

import contextlib
import functools
import importlib.abc
import importlib.machinery
import importlib.util
import sys
from collections.abc import Callable, Sequence
from types import ModuleType
from typing import Any

__all__ = ["BOXPLOTS_ATTR", "Boxplot", "boxplots_of", "record_boxplots"]

BOXPLOTS_ATTR = "_sandgate_boxplots"
_TARGET = "matplotlib.axes"
_WRAPPED = "_sandgate_wrapped"


class Boxplot:
    """One ``bxp`` call: its statistics (one dict per box) and the artists it returned."""

    def __init__(self, stats: list[dict[str, Any]], artists: dict[str, list[Any]]) -> None:
        self.stats = stats
        self.artists = artists

    def all_artists(self) -> list[Any]:
        return [artist for group in self.artists.values() for artist in group]


def boxplots_of(axes: Any) -> list[Boxplot]:
    """The box plots drawn on ``axes`` that are still on it (``cla()`` removes artists)."""
    recorded: list[Boxplot] = getattr(axes, BOXPLOTS_ATTR, [])
    return [plot for plot in recorded if any(a.axes is axes for a in plot.all_artists())]


def record_boxplots() -> None:
    """Wraps ``Axes.bxp`` now if matplotlib is loaded, else as soon as it is."""
    module = sys.modules.get(_TARGET)
    if module is not None:
        _wrap_bxp(module)
    elif not any(isinstance(finder, _AfterImport) for finder in sys.meta_path):
        sys.meta_path.insert(0, _AfterImport(_TARGET, _wrap_bxp))


def _wrap_bxp(module: ModuleType) -> None:
    axes_class = module.Axes
    original = axes_class.bxp
    if getattr(original, _WRAPPED, False):
        return

    @functools.wraps(original)
    def bxp(self: Any, bxpstats: Sequence[dict[str, Any]], *args: Any, **kwargs: Any) -> Any:
        stats = list(bxpstats)
        artists = original(self, stats, *args, **kwargs)
        if isinstance(artists, dict):
            plots = self.__dict__.setdefault(BOXPLOTS_ATTR, [])
            plots.append(Boxplot([dict(s) for s in stats], artists))
        return artists

    setattr(bxp, _WRAPPED, True)
    axes_class.bxp = bxp


class _AfterImport(importlib.abc.MetaPathFinder):
    """Finds nothing itself: when ``name`` is imported, it lets the other finders find it
    and calls ``then(module)`` once the module has run. Removes itself after one use."""

    def __init__(self, name: str, then: Callable[[ModuleType], None]) -> None:
        self._name = name
        self._then = then

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        if fullname != self._name:
            return None
        if self in sys.meta_path:
            sys.meta_path.remove(self)
        spec = importlib.util.find_spec(fullname)
        loader = spec.loader if spec is not None else None
        if spec is None or loader is None or not hasattr(loader, "exec_module"):
            return spec
        run = loader.exec_module
        then = self._then

        def exec_module(module: ModuleType) -> None:
            run(module)
            # A matplotlib we do not understand: plots work, box plots carry no chart data.
            with contextlib.suppress(Exception):
                then(module)

        loader.exec_module = exec_module  # type: ignore[method-assign]
        return spec
