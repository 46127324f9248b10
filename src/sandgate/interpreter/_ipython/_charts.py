"""matplotlib figures → ``e2b/chart`` (the SDKs' typed ``Result.chart``).

The schema is the one the SDKs deserialize (``e2b_code_interpreter/charts.py``, and the JS
``charts.d.ts``); every key they index is always present, ``null`` when there is nothing:

* every chart: ``type`` (``line``, ``scatter``, ``bar``, ``pie``, ``box_and_whisker``,
  ``superchart``, ``unknown``), ``title``, ``elements``;
* 2-D charts (all but pie): ``x_label``, ``y_label``, and ``x_unit``/``y_unit`` taken from a
  label's ``" (unit)"`` or ``"[unit]"``;
* line and scatter: ``x_ticks``, ``x_tick_labels``, ``x_scale`` and the same for ``y``;
  elements ``{label, points: [[x, y], ...]}``. Scales are matplotlib's (``linear``, ``log``,
  ``symlog``, ``logit``, ``function``, ``functionlog``, ``asinh``), or ``datetime`` and
  ``categorical`` for date and string axes, whose ticks and points are ISO 8601 strings and
  category names;
* bar: elements ``{label, group, value}``: the category, the series (the bar container's
  label) and the bar's value; for horizontal bars ``x_label`` names the category axis too;
* pie: elements ``{label, angle, radius}`` (angle in degrees);
* box_and_whisker: elements ``{label, min, first_quartile, median, third_quartile, max,
  outliers}``, the statistics the plot was drawn from (``_boxplots``);
* superchart: a figure with several plotted axes; ``title`` is the figure's suptitle and
  ``elements`` are the charts of its axes.

A figure with nothing plotted has no chart; colorbars are not charts of their own. A figure
with more than ``MAX_POINTS`` data points in all carries no chart (its PNG is still there):
the data could be far larger than the output a cell may produce.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Iterator
from typing import Any

from . import _boxplots

__all__ = ["MAX_POINTS", "figure_chart"]

MAX_POINTS = 100_000
_UNIT = re.compile(r"\s\(([^()]*)\)|\[([^\[\]]*)\]")


def figure_chart(figure: Any) -> dict[str, Any] | None:
    """The ``e2b/chart`` payload for ``figure``, or ``None``."""
    charts = [
        chart
        for axes in figure.get_axes()
        if not _is_colorbar(axes)
        for chart in [_axes_chart(axes)]
        if chart is not None
    ]
    if not charts:
        return None
    if len(charts) == 1:
        chart = charts[0]
    else:
        chart = {"type": "superchart", "title": _suptitle(figure), "elements": charts}
    if _size(chart) > MAX_POINTS:
        return None
    return chart


def _axes_chart(axes: Any) -> dict[str, Any] | None:
    kind = _kind(axes)
    if kind is None:
        return None
    chart: dict[str, Any] = {"type": kind, "title": axes.get_title() or None, "elements": []}
    if kind == "pie":
        chart["elements"] = list(_wedges(axes))
        return chart
    x_axis, y_axis = axes.xaxis, axes.yaxis
    horizontal = False
    if kind in ("line", "scatter"):
        chart.update(_axis_info("x", x_axis))
        chart.update(_axis_info("y", y_axis))
        chart["elements"] = list(_lines(axes) if kind == "line" else _scatters(axes))
    elif kind == "bar":
        chart["elements"], horizontal = _bars(axes)
    elif kind == "box_and_whisker":
        chart["elements"], horizontal = _boxes(axes)
    x_label, y_label = axes.get_xlabel() or None, axes.get_ylabel() or None
    if horizontal:
        x_label, y_label = y_label, x_label
    chart["x_label"], chart["y_label"] = x_label, y_label
    chart["x_unit"], chart["y_unit"] = _unit(x_label), _unit(y_label)
    return chart


def _kind(axes: Any) -> str | None:
    """What ``axes`` shows, from its artists; ``None`` when it shows nothing."""
    lines, patches = list(axes.lines), list(axes.patches)
    collections, others = list(axes.collections), [*axes.images, *axes.tables, *axes.artists]
    if not (lines or patches or collections or others):
        return None
    drawn = {id(artist) for artist in [*lines, *patches, *collections]}
    boxplots = _boxplots.boxplots_of(axes)
    if boxplots and not others:
        boxed = {id(a) for plot in boxplots for a in plot.all_artists()}
        return "box_and_whisker" if drawn <= boxed else "unknown"
    if others:
        return "unknown"
    if patches and not lines and not collections and all(_is_wedge(p) for p in patches):
        return "pie"
    bars = _bar_containers(axes)
    if bars:
        in_bars = {id(a) for container in bars for a in _flatten(container)}
        return "bar" if drawn <= in_bars else "unknown"
    if lines and not patches and not collections:
        return "line"
    if collections and not lines and not patches and all(_is_scatter(c) for c in collections):
        return "scatter"
    return "unknown"


def _lines(axes: Any) -> Iterator[dict[str, Any]]:
    x_axis, y_axis = axes.xaxis, axes.yaxis
    for line in axes.lines:
        points = [
            [_position(x_axis, x), _position(y_axis, y)] for x, y in line.get_xydata().tolist()
        ]
        yield {"label": str(line.get_label()), "points": points}


def _scatters(axes: Any) -> Iterator[dict[str, Any]]:
    x_axis, y_axis = axes.xaxis, axes.yaxis
    for collection in axes.collections:
        offsets = collection.get_offsets()
        points = [[_position(x_axis, x), _position(y_axis, y)] for x, y in _pairs(offsets)]
        yield {"label": str(collection.get_label()), "points": points}


def _bars(axes: Any) -> tuple[list[dict[str, Any]], bool]:
    elements: list[dict[str, Any]] = []
    horizontal = False
    for container in _bar_containers(axes):
        horizontal = getattr(container, "orientation", None) == "horizontal"
        category_axis = axes.yaxis if horizontal else axes.xaxis
        values = getattr(container, "datavalues", None)
        group = _public_label(container.get_label())
        for index, bar in enumerate(container.patches):
            if horizontal:
                position, size = bar.get_y() + bar.get_height() / 2, bar.get_width()
            else:
                position, size = bar.get_x() + bar.get_width() / 2, bar.get_height()
            value = values[index] if values is not None and index < len(values) else size
            elements.append(
                {
                    "label": _category(category_axis, position),
                    "group": group,
                    "value": _number(value),
                }
            )
    return elements, horizontal


def _boxes(axes: Any) -> tuple[list[dict[str, Any]], bool]:
    elements: list[dict[str, Any]] = []
    horizontal = False
    for plot in _boxplots.boxplots_of(axes):
        horizontal = _horizontal_boxes(plot)
        category_axis = axes.yaxis if horizontal else axes.xaxis
        positions = _box_positions(plot, horizontal)
        for index, stats in enumerate(plot.stats):
            label = stats.get("label")
            if label is None and index < len(positions):
                label = _category(category_axis, positions[index])
            elements.append(
                {
                    "label": str(label if label is not None else index + 1),
                    "min": _number(stats.get("whislo")),
                    "first_quartile": _number(stats.get("q1")),
                    "median": _number(stats.get("med")),
                    "third_quartile": _number(stats.get("q3")),
                    "max": _number(stats.get("whishi")),
                    "outliers": [_number(v) for v in _flat_values(stats.get("fliers", []))],
                }
            )
    return elements, horizontal


def _horizontal_boxes(plot: _boxplots.Boxplot) -> bool:
    """Whether the boxes lie along x: their median lines are then vertical."""
    for median in plot.artists.get("medians", []):
        xs, ys = median.get_xdata(), median.get_ydata()
        if len(xs) >= 2 and len(ys) >= 2:
            return bool(xs[0] == xs[-1] and ys[0] != ys[-1])
    return False


def _box_positions(plot: _boxplots.Boxplot, horizontal: bool) -> list[float]:
    """The centre of each box on the category axis, from its median line."""
    positions = []
    for median in plot.artists.get("medians", []):
        data = median.get_ydata() if horizontal else median.get_xdata()
        values = [float(v) for v in data]
        positions.append((min(values) + max(values)) / 2 if values else math.nan)
    return positions


def _wedges(axes: Any) -> Iterator[dict[str, Any]]:
    for wedge in axes.patches:
        yield {
            "label": str(wedge.get_label()),
            "angle": round(abs(float(wedge.theta2) - float(wedge.theta1)), 4),
            "radius": _number(wedge.r),
        }


def _axis_info(name: str, axis: Any) -> dict[str, Any]:
    locations = [float(v) for v in axis.get_majorticklocs()]
    return {
        f"{name}_ticks": [_position(axis, v) for v in locations],
        f"{name}_tick_labels": _tick_labels(axis, locations),
        f"{name}_scale": _scale(axis),
    }


def _tick_labels(axis: Any, locations: list[float]) -> list[str]:
    try:
        return [str(t) for t in axis.get_major_formatter().format_ticks(locations)]
    except Exception:  # a formatter that needs a drawn figure: take what was drawn, if any
        return [t.get_text() for t in axis.get_ticklabels()]


def _scale(axis: Any) -> str:
    if _is_datetime(axis):
        return "datetime"
    if _categories(axis) is not None:
        return "categorical"
    return str(axis.get_scale())


def _position(axis: Any, value: float) -> float | str | None:
    """A coordinate on ``axis`` as the user gave it: an ISO 8601 string on a date axis, the
    category on a string axis, else the number (``None`` for NaN and infinities)."""
    if value is None or not math.isfinite(value):
        return None
    if _is_datetime(axis):
        return _iso(axis, value)
    categories = _categories(axis)
    if categories is not None:
        name = categories.get(round(value)) if abs(value - round(value)) < 1e-9 else None
        return name if name is not None else float(value)
    return float(value)


def _category(axis: Any, position: float) -> str:
    """The label of the category at ``position`` on ``axis``: the string it was given as, the
    date, the tick label at that place, or the number itself."""
    value = _position(axis, position)
    if isinstance(value, str):
        return value
    locations = [float(v) for v in axis.get_majorticklocs()]
    for location, label in zip(locations, _tick_labels(axis, locations), strict=False):
        if abs(location - position) < 1e-9 and label:
            return label
    return f"{position:g}"


def _is_datetime(axis: Any) -> bool:
    if getattr(axis, "freq", None) is not None:  # pandas' period axes
        return True
    import matplotlib.dates

    converter = _converter(axis)
    return isinstance(converter, matplotlib.dates.DateConverter) or (
        type(converter).__module__ == "matplotlib.dates"
    )


def _iso(axis: Any, value: float) -> str | None:
    freq = getattr(axis, "freq", None)
    try:
        if freq is not None:
            import pandas

            return str(pandas.Period(ordinal=round(value), freq=freq).start_time.isoformat())
        import matplotlib.dates

        return str(matplotlib.dates.num2date(value).isoformat())
    except (ValueError, OverflowError, TypeError):
        return None


def _categories(axis: Any) -> dict[int, str] | None:
    """Position → category of a string axis, or ``None`` for other axes."""
    import matplotlib.category

    if not isinstance(_converter(axis), matplotlib.category.StrCategoryConverter):
        return None
    mapping = getattr(axis.get_units(), "_mapping", None) or {}
    return {int(position): str(name) for name, position in mapping.items()}


def _converter(axis: Any) -> Any:
    get = getattr(axis, "get_converter", None)
    return get() if callable(get) else getattr(axis, "converter", None)


def _bar_containers(axes: Any) -> list[Any]:
    from matplotlib.container import BarContainer

    return [c for c in axes.containers if isinstance(c, BarContainer)]


def _is_wedge(artist: Any) -> bool:
    from matplotlib.patches import Wedge

    return isinstance(artist, Wedge)


def _is_scatter(artist: Any) -> bool:
    from matplotlib.collections import PathCollection

    return isinstance(artist, PathCollection)


def _is_colorbar(axes: Any) -> bool:
    return getattr(axes, "_colorbar", None) is not None or axes.get_label() == "<colorbar>"


def _flatten(artists: Any) -> Iterator[Any]:
    """The artists of a container, its error bars included, however nested."""
    if isinstance(artists, list | tuple):
        for item in artists:
            yield from _flatten(item)
    elif artists is not None:
        yield artists
        errorbar = getattr(artists, "errorbar", None)
        if errorbar is not None:
            yield from _flatten(errorbar)


def _pairs(offsets: Any) -> Iterable[tuple[float, float]]:
    for row in offsets.tolist() if hasattr(offsets, "tolist") else offsets:
        if len(row) >= 2:
            yield float(row[0]), float(row[1])


def _flat_values(values: Any) -> list[Any]:
    return list(values.tolist() if hasattr(values, "tolist") else values)


def _number(value: Any) -> float | None:
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    return number if math.isfinite(number) else None


def _public_label(label: Any) -> str:
    """matplotlib names unlabeled artists ``_child0``, ``_nolegend_``: those are not names."""
    text = str(label or "")
    return "" if text.startswith("_") else text


def _unit(label: str | None) -> str | None:
    match = _UNIT.search(label) if label else None
    if match is None:
        return None
    return match.group(1) if match.group(1) is not None else match.group(2)


def _suptitle(figure: Any) -> str | None:
    get = getattr(figure, "get_suptitle", None)
    if callable(get):
        return str(get()) or None
    text = getattr(figure, "_suptitle", None)
    return (text.get_text() or None) if text is not None else None


def _size(chart: dict[str, Any]) -> int:
    """Data points in ``chart``: each point of a line or scatter, else each element."""
    total = 0
    for element in chart.get("elements", []):
        if isinstance(element, dict) and "points" in element:
            total += len(element["points"])
        elif isinstance(element, dict) and "elements" in element:
            total += _size(element)
        else:
            total += 1
    return total
