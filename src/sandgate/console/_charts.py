"""CPU and memory drawn from the metrics sampler's stored samples, as inline SVG geometry.

Pure functions: the templates draw the ``<svg>`` from what these return (polyline points,
axis labels), so the pages need no chart library and no script, and the geometry is tested
without a browser. Values are clamped into the chart, so a sample above its total (memory
measured between two cgroup reads) cannot draw outside it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Final, Protocol

from sandgate.store import SandboxMetricSample

__all__ = ["MAX_CHART_POINTS", "Chart", "Spark", "charts", "spark"]

#: Most points one detail chart draws: longer series are averaged in consecutive groups.
MAX_CHART_POINTS: Final = 300
_MiB: Final = 1024 * 1024


@dataclass(frozen=True)
class Spark:
    """A list row's two sparklines (100 x 20) and the newest values as text."""

    cpu: str
    mem: str
    cpu_now: str
    mem_now: str


@dataclass(frozen=True)
class Chart:
    """A detail chart (600 x 140): its line, the top of its scale, its time span and the
    newest value."""

    title: str
    points: str
    top: str
    start: str
    end: str
    now: str


class _Sampled(Protocol):
    """What a sparkline reads of a sample: a stored row or the list page's lighter
    ``SamplePoint``."""

    @property
    def cpu_used_pct(self) -> float: ...
    @property
    def mem_used(self) -> int: ...
    @property
    def mem_total(self) -> int: ...


def _line(values: Sequence[float], top: float, width: float, height: float) -> str:
    """``x,y`` pairs of ``values`` scaled into ``width x height`` (0 at the bottom); a
    single value is drawn as a flat line."""
    if len(values) == 1:
        values = [values[0], values[0]]
    step = width / (len(values) - 1)
    scale = top if top > 0 else 1.0
    points = []
    for index, value in enumerate(values):
        share = min(max(value / scale, 0.0), 1.0)
        points.append(f"{index * step:.1f},{height - share * height:.1f}")
    return " ".join(points)


def _mem_share(sample: _Sampled) -> float:
    return sample.mem_used / sample.mem_total * 100 if sample.mem_total > 0 else 0.0


def spark(samples: Sequence[_Sampled]) -> Spark | None:
    """The sparklines of ``samples`` (oldest first); None when there are none."""
    if not samples:
        return None
    last = samples[-1]
    return Spark(
        cpu=_line([s.cpu_used_pct for s in samples], 100, 100, 20),
        mem=_line([_mem_share(s) for s in samples], 100, 100, 20),
        cpu_now=f"{last.cpu_used_pct:.0f}%",
        mem_now=f"{last.mem_used / _MiB:.0f} MiB",
    )


def _grouped(samples: Sequence[SandboxMetricSample]) -> list[list[SandboxMetricSample]]:
    size = max(1, -(-len(samples) // MAX_CHART_POINTS))
    return [list(samples[at : at + size]) for at in range(0, len(samples), size)]


def _clock(time_ms: int) -> str:
    return datetime.fromtimestamp(time_ms / 1000, UTC).strftime("%H:%M:%S")


def charts(samples: Sequence[SandboxMetricSample]) -> list[Chart]:
    """The CPU and memory charts of ``samples`` (oldest first); empty when there are none."""
    if not samples:
        return []
    groups = _grouped(samples)
    last = samples[-1]
    cpu = [sum(s.cpu_used_pct for s in g) / len(g) for g in groups]
    mem = [sum(s.mem_used for s in g) / len(g) / _MiB for g in groups]
    mem_top = max(s.mem_total for s in samples) / _MiB
    start, end = _clock(samples[0].time_ms), _clock(last.time_ms)
    return [
        Chart("CPU", _line(cpu, 100, 600, 140), "100%", start, end, f"{last.cpu_used_pct:.1f}%"),
        Chart(
            "Memory",
            _line(mem, mem_top, 600, 140),
            f"{mem_top:.0f} MiB",
            start,
            end,
            f"{last.mem_used / _MiB:.0f} MiB",
        ),
    ]
