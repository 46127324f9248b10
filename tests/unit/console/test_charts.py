"""The console's metrics geometry: sparklines and charts from stored samples."""

from __future__ import annotations

from sandgate.console._charts import MAX_CHART_POINTS, charts, spark
from sandgate.store import SandboxMetricSample

MiB = 1024 * 1024


def _sample(at_s: int, cpu: float, mem_mib: int, total_mib: int = 512) -> SandboxMetricSample:
    return SandboxMetricSample(
        sandbox_id="sbx",
        time_ms=at_s * 1000,
        cpu_count=1,
        cpu_used_pct=cpu,
        mem_used=mem_mib * MiB,
        mem_total=total_mib * MiB,
        mem_cache=0,
        disk_used=0,
        disk_total=0,
    )


def _ys(points: str) -> list[float]:
    return [float(pair.split(",")[1]) for pair in points.split()]


def test_no_samples_draw_nothing() -> None:
    assert spark([]) is None
    assert charts([]) == []


def test_a_sparkline_scales_cpu_and_memory_share_into_its_box() -> None:
    drawn = spark([_sample(0, 0, 0), _sample(5, 50, 256), _sample(10, 100, 512)])
    assert drawn is not None
    assert _ys(drawn.cpu) == [20.0, 10.0, 0.0]  # 0 at the bottom, 100 % at the top
    assert _ys(drawn.mem) == [20.0, 10.0, 0.0]
    assert drawn.cpu_now == "100%" and drawn.mem_now == "512 MiB"


def test_one_sample_is_a_flat_line_and_values_beyond_the_scale_are_clamped() -> None:
    drawn = spark([_sample(0, 250, 1024)])
    assert drawn is not None
    assert drawn.cpu == "0.0,0.0 100.0,0.0" and drawn.mem == "0.0,0.0 100.0,0.0"


def test_charts_are_thinned_to_their_point_budget_and_labelled() -> None:
    samples = [_sample(i * 5, i % 100, 100) for i in range(2000)]
    cpu, mem = charts(samples)
    assert cpu.title == "CPU" and mem.title == "Memory"
    assert len(cpu.points.split()) <= MAX_CHART_POINTS
    assert mem.top == "512 MiB" and mem.now == "100 MiB"
    assert cpu.start == "00:00:00" and cpu.end == "02:46:35"
    assert all(0 <= y <= 140 for y in _ys(cpu.points))


def test_the_pages_say_when_a_sandbox_has_no_samples_yet() -> None:
    from types import SimpleNamespace

    from jinja2 import Environment, FileSystemLoader

    import sandgate.console

    folder = f"{sandgate.console.__path__[0]}/templates"
    pages = Environment(loader=FileSystemLoader(folder), autoescape=True)
    row = SimpleNamespace(id="sbx", state="running")
    detail = pages.get_template("_metrics.html").render(sandbox=row, charts=[])
    assert "No metrics samples yet" in detail and "<svg" not in detail
    drawn = pages.get_template("_metrics.html").render(
        sandbox=row, charts=charts([_sample(0, 10, 100)])
    )
    assert 'id="cpu-chart"' in drawn and 'id="memory-chart"' in drawn
