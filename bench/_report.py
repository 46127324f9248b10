"""Shared by the benchmark scripts: percentiles and the results file in docs/benchmarks.md."""

from __future__ import annotations

import argparse
import json
import platform
import re
import statistics
import subprocess
import time
from collections.abc import Iterable, Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "benchmarks.md"


_HEADER = """# Benchmarks

How to read these: every number is measured on the machine named in its section, next to a raw
baseline measured in the same run; ratios are Sandgate / baseline. Reproduce with the command
given in each section. Targets are those of the design document (§6).
"""


def pct(samples: list[float], q: float) -> float:
    ordered = sorted(samples)
    if not ordered:
        return float("nan")
    index = min(len(ordered) - 1, max(0, round(q / 100 * (len(ordered) - 1))))
    return ordered[index]


def summary_ms(samples: list[float]) -> dict[str, float]:
    return {
        "p50": pct(samples, 50) * 1000,
        "p95": pct(samples, 95) * 1000,
        "p99": pct(samples, 99) * 1000,
        "mean": statistics.fmean(samples) * 1000 if samples else float("nan"),
    }


def machine() -> str:
    import os

    system = f"{platform.system()} {platform.release()}"
    return f"{system}, {os.cpu_count()} CPUs, Python {platform.python_version()}"


def write_results(name: str, data: Any) -> Path:
    """Writes ``data`` as ``bench/results/<name>`` (indented JSON); returns the path."""
    path = ROOT / "bench" / "results" / name
    path.parent.mkdir(exist_ok=True)
    path.write_text(json.dumps(data, indent=2) + "\n")
    return path


def write_section(title: str, body: str) -> None:
    """Replaces (or appends) the ``## title`` section of docs/benchmarks.md."""
    DOC.parent.mkdir(exist_ok=True)
    text = DOC.read_text() if DOC.exists() else _HEADER
    section = f"## {title}\n\n{body.strip()}\n"
    pattern = re.compile(rf"^## {re.escape(title)}\n.*?(?=^## |\Z)", re.S | re.M)
    if pattern.search(text):
        text = pattern.sub(lambda _: section + "\n", text)
    else:
        text = text.rstrip() + "\n\n" + section
    DOC.write_text(text.rstrip() + "\n")


def timed(argv: list[str]) -> float:
    """Seconds one run of ``argv`` takes (it must succeed)."""
    start = time.perf_counter()
    subprocess.run(argv, check=True, capture_output=True)
    return time.perf_counter() - start


def add_side_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of a bench that runs this checkout against an earlier tree's ``src``."""
    parser.add_argument("--previous-src", type=Path, required=True)
    parser.add_argument("--previous-label", default="the previous commit")
    parser.add_argument("--this-label", default="this checkout")


def run_head(loads: Sequence[float]) -> dict[str, Any]:
    """What a bench's results begin with: when, where, and how loaded the host was (the
    1-minute load averages seen over the run)."""
    return {
        "when": datetime.now(UTC).isoformat(timespec="seconds"),
        "machine": machine(),
        "load": [min(loads), max(loads)],
    }


def side_head(args: argparse.Namespace, loads: Sequence[float]) -> dict[str, Any]:
    """What every paired bench's results begin with: ``run_head`` and which two trees ran
    (``add_side_arguments``)."""
    return {**run_head(loads), "this": args.this_label, "previous": args.previous_label}


def side_sources(parser: argparse.ArgumentParser, args: argparse.Namespace) -> dict[str, Path]:
    """``{"this": src, "previous": src}``; a ``--previous-src`` without the package is an
    argument error."""
    if not (args.previous_src / "sandgate" / "__init__.py").is_file():
        parser.error(f"{args.previous_src} holds no sandgate package (give the tree's src)")
    return {"this": ROOT / "src", "previous": args.previous_src.resolve()}


def round_medians(
    rounds: Sequence[Mapping[str, Any]], names: Iterable[str]
) -> tuple[dict[str, dict[str, float]], dict[str, float]]:
    """For rounds of ``{name: {key: value}}``: each name's median per key over the rounds, and
    the median per key of the per-round differences ``this - previous`` (what a paired bench
    reports: a difference taken inside each round cancels that round's machine speed)."""
    median = {
        name: {key: statistics.median(rnd[name][key] for rnd in rounds) for key in rounds[0][name]}
        for name in names
    }
    difference = {
        key: statistics.median(rnd["this"][key] - rnd["previous"][key] for rnd in rounds)
        for key in rounds[0]["this"]
    }
    return median, difference


def side_order(index: int) -> list[str]:
    """Which side goes first in round ``index``: they take turns."""
    return ["this", "previous"] if index % 2 == 0 else ["previous", "this"]
