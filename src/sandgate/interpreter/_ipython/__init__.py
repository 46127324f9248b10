"""Helpers that run inside the Python kernel, not in the server.

``_languages`` loads this package by path at every kernel start, under the private module
name ``_sandgate_ipython`` (user code's ``sys.path`` is left alone), and calls ``install``:

* ``_output``: one cell's stdout/stderr is bounded (``OutputLimitExceeded``);
* ``_data``: a pandas DataFrame shown as a result also carries ``e2b/data``, the SDKs'
  ``Result.data`` (``{column: [values...]}``, as E2B's template returns it);
* ``_charts`` (with ``_boxplots``): a matplotlib figure shown as a result also carries
  ``e2b/chart``, the SDKs' typed ``Result.chart``.

pandas and matplotlib are imported only by user code: formatters are registered by type
name and the boxplot hook waits for matplotlib's import, so a kernel that never plots pays
nothing. A formatter that fails leaves its MIME type out, never an error in the cell's output;
the last few failures are kept in ``sys.modules["_sandgate_ipython"].failures`` for whoever
debugs it.

Trust: this code runs as, and with the same rights as, the code in the cell; it guards
nothing.
"""

from __future__ import annotations

import traceback
from typing import Any

from IPython import get_ipython
from IPython.core.formatters import BaseFormatter
from traitlets import ObjectName, Unicode

from . import _boxplots, _charts, _data, _output

__all__ = ["failures", "install"]

_KEPT_FAILURES = 5
failures: list[str] = []
"""Tracebacks of the last formatter failures, newest last."""


class _ByTypeName(BaseFormatter):  # type: ignore[misc]
    """Converts instances of the class named ``type_name`` from the ``package`` package.

    Not IPython's ``for_type_by_name``: the inline matplotlib backend pops every formatter's
    ``Figure`` entry when it starts, and pandas 3 reports ``DataFrame.__module__`` as plain
    ``pandas``. Matching on the class's name and package survives both, and needs neither
    library imported. A conversion that fails means "no such representation": IPython would
    print the formatter's traceback into the cell's output instead.
    """

    package = ""
    type_name = ""

    def convert(self, obj: Any) -> dict[str, Any] | None:
        raise NotImplementedError

    def __call__(self, obj: Any) -> Any:
        if not (self.enabled and _is_instance_by_name(obj, self.package, self.type_name)):
            return super().__call__(obj)
        try:
            return self.convert(obj)
        except Exception:
            failures.append(f"{type(self).__name__}: {traceback.format_exc()}")
            del failures[:-_KEPT_FAILURES]
            return None


class _DataFormatter(_ByTypeName):
    format_type = Unicode("e2b/data")
    print_method = ObjectName("_repr_e2b_data_")
    _return_type = (dict,)
    package, type_name = "pandas", "DataFrame"

    def convert(self, obj: Any) -> dict[str, Any] | None:
        return _data.frame_data(obj)


class _ChartFormatter(_ByTypeName):
    format_type = Unicode("e2b/chart")
    print_method = ObjectName("_repr_e2b_chart_")
    _return_type = (dict,)
    package, type_name = "matplotlib", "Figure"

    def convert(self, obj: Any) -> dict[str, Any] | None:
        return _charts.figure_chart(obj)


def _is_instance_by_name(obj: Any, package: str, type_name: str) -> bool:
    return any(
        cls.__name__ == type_name
        and (cls.__module__ == package or cls.__module__.startswith(package + "."))
        for cls in type(obj).__mro__
    )


def install(max_output: int) -> None:
    """Sets up the running IPython kernel; called once per kernel process."""
    shell: Any = get_ipython()
    _output.bound_output(shell, max_output)
    formatters = shell.display_formatter.formatters
    formatters["e2b/data"] = _DataFormatter(parent=shell.display_formatter)
    formatters["e2b/chart"] = _ChartFormatter(parent=shell.display_formatter)
    _boxplots.record_boxplots()
