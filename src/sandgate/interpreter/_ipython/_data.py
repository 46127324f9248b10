"""pandas DataFrames → ``e2b/data`` (the SDKs' ``Result.data``).

The shape is E2B's: one key per column (its name as a string), each holding the column's
values in row order, index left out, like ``DataFrame.to_dict(orient="list")``. Values are
made JSON-safe on the way: NaN, NaT and infinities become ``null``, timestamps, dates and
times become ISO 8601 strings, timedeltas their string form, NumPy scalars plain numbers,
anything else its ``str()``.

A frame of more than ``MAX_CELLS`` cells carries no ``data`` (its HTML and text forms are
still there): the whole frame, unlike pandas' truncated HTML view, could be far larger than
the output a cell may produce.
"""

from __future__ import annotations

import datetime
import math
from typing import Any

__all__ = ["MAX_CELLS", "frame_data", "json_value"]

MAX_CELLS = 100_000


def frame_data(frame: Any) -> dict[str, Any] | None:
    """The ``e2b/data`` payload of ``frame``, or ``None`` when it is too large."""
    rows, columns = frame.shape
    if rows * max(columns, 1) > MAX_CELLS:
        return None
    return {
        str(name): [json_value(value) for value in column.tolist()]
        for name, column in frame.items()
    }


def json_value(value: Any) -> Any:
    """``value`` as something ``json.dumps`` writes as standard JSON."""
    if value is None or isinstance(value, bool | str | int):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if type(value).__name__ in _MISSING_TYPES:
        return None
    if isinstance(value, datetime.datetime | datetime.date | datetime.time):
        return value.isoformat()
    if isinstance(value, list | tuple):
        return [json_value(item) for item in value]
    if isinstance(value, dict):
        return {str(key): json_value(item) for key, item in value.items()}
    if type(value).__module__ == "numpy" and hasattr(value, "tolist"):
        return json_value(value.tolist())
    return str(value)


#: pandas' missing-value markers (NaT is a ``datetime`` whose ``isoformat()`` is "NaT").
_MISSING_TYPES = frozenset({"NaTType", "NAType"})
