"""The geometry of the status page's pictures, computed here so the templates only draw it (as SVG).

* ``run_bars``: one bar per run, for a figure of the run (bytes reclaimed, files removed); real runs
  filled, dry runs outlined (what they would have removed), failed runs marked, each kind in its colour;
* ``lag_bars``: one bar per lag check of an index, lagging checks marked;
* ``score_bars``, ``histogram_bars``: a table's health score per check, its data files per size class;
* ``phase_segments``: a run's phase timings as the segments of one horizontal bar;
* ``delete_segments``: a table's data and delete files (by kind) as the segments of one bar.

A chart drawn large has a value axis: ``ticks`` at zero, half and the peak, in the figure's unit.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from airflow_iceberg_maint.airflow.ui.wording import plural, size
from airflow_iceberg_maint.state.status_records import RunRecord

WIDTH, HEIGHT = 360.0, 90.0
AXIS = 64.0  # the width left of the bars, for the value axis's labels, when drawn large
_GAP = 0.2  # of each slot
_MIN_VISIBLE = 3.0  # a bar of a zero value still shows, as a thin line


@dataclass(frozen=True)
class Bar:
    x: float
    y: float
    width: float
    height: float
    css: str  # "real", "dry", "failed", "lagging", "ok"; a run's bar also "kind-<kind>"
    title: str  # the tooltip: when, and the value as text


@dataclass(frozen=True)
class Tick:
    y: float
    label: str


@dataclass(frozen=True)
class BarChart:
    bars: Sequence[Bar]
    peak: str  # the value of the tallest bar, as text
    first: str  # the time (or class) of the first and the last bar, as text
    last: str
    ticks: Sequence[Tick] = ()
    width: float = WIDTH
    height: float = HEIGHT
    axis: float = AXIS


def _chart(points: Sequence[tuple[float, str, str, str]], text: Callable[[float], str]) -> BarChart | None:
    """``points``: (value, css, title, time) in order; None when there is nothing to draw."""
    if not points:
        return None
    top = max(value for value, *_ in points)
    peak = top or 1.0
    slot = WIDTH / len(points)
    ticks = [Tick(round(HEIGHT - share * HEIGHT, 2), text(top * share)) for share in (0.0, 0.5, 1.0)] if top else []
    bars = [
        Bar(
            x=round(i * slot + slot * _GAP / 2, 2),
            y=round(HEIGHT - max(_MIN_VISIBLE, value / peak * HEIGHT), 2),
            width=round(slot * (1 - _GAP), 2),
            height=round(max(_MIN_VISIBLE, value / peak * HEIGHT), 2),
            css=css,
            title=f"{when}: {title}",
        )
        for i, (value, css, title, when) in enumerate(points)
    ]
    return BarChart(bars, text(top), points[0][3], points[-1][3], ticks)


def run_bars(
    runs: Sequence[RunRecord],
    value: Callable[[RunRecord], int | None],
    text: Callable[[float], str],
    when: Callable[[str], str],
) -> BarChart | None:
    """One bar per run that has the figure (``value`` None: the run's kind has none)."""
    points = []
    for run in runs:
        figure = value(run)
        if figure is None:
            continue
        css = ("failed" if run.status == "failed" else "dry" if run.dry_run else "real") + f" kind-{run.kind}"
        verb = "would remove" if run.dry_run else "removed"
        label = f"{run.kind}, {'dry run' if run.dry_run else 'real run'}, {run.status}: {verb} {text(figure)}"
        points.append((float(figure), css, label, when(run.ran_at)))  # when the work ran, not the clock
    return _chart(points, text)


def lag_bars(history: Sequence[Mapping[str, Any]], when: Callable[[str], str]) -> BarChart | None:
    """One bar per check of an index: its snapshots behind, lagging checks marked."""
    points = []
    for point in history:
        behind = point.get("snapshots_behind")
        if not isinstance(behind, int):
            continue
        css = "lagging" if point.get("lagging") else "ok"
        label = plural(behind, "snapshot") + " behind" + (", lagging" if point.get("lagging") else ", within bounds")
        points.append((float(behind), css, label, when(str(point.get("checked_at") or ""))))
    return _chart(points, lambda v: plural(round(v, 1), "snapshot"))


def score_bars(history: Sequence[Mapping[str, Any]], when: Callable[[str], str]) -> BarChart | None:
    """One bar per health check: its score (0 to 100), coloured by band."""
    points = []
    for point in history:
        score = point.get("score")
        if not isinstance(score, int | float):
            continue
        points.append((float(score), f"score {score_band(score)}", f"score {score:g}", when(str(point["checked_at"]))))
    return _chart(points, lambda v: f"{v:g}")


def score_band(score: float) -> str:
    """``good`` (80 and up), ``fair`` (50 and up) or ``poor``."""
    return "good" if score >= 80 else "fair" if score >= 50 else "poor"


def histogram_bars(histogram: Sequence[Mapping[str, Any]]) -> BarChart | None:
    """One bar per size class of the data files (``file_size_histogram``), labelled by its upper bound."""
    points = []
    lower: float = 0
    for bucket in histogram:
        upper, files = bucket.get("upper_bytes"), int(bucket.get("files") or 0)
        label = f"up to {size(upper)}" if isinstance(upper, int | float) else f"over {size(lower)}"
        points.append((float(files), "files", plural(files, "file"), label))
        lower = upper if isinstance(upper, int | float) else lower
    return _chart(points, lambda v: plural(round(v, 1), "file"))


@dataclass(frozen=True)
class Segment:
    name: str
    seconds: float
    percent: float  # of the whole bar
    slot: int  # which of the palette's colours


def phase_segments(phase_seconds: Mapping[str, Any] | None) -> list[Segment]:
    """A run's phases in the order they ran, each with its share of the total time."""
    phases = [(str(k), float(v)) for k, v in (phase_seconds or {}).items() if isinstance(v, int | float) and v >= 0]
    total = sum(seconds for _, seconds in phases)
    if total <= 0:
        return []
    return [Segment(name, seconds, round(seconds / total * 100, 2), i % 8) for i, (name, seconds) in enumerate(phases)]


def delete_segments(health: Mapping[str, Any]) -> list[Segment]:
    """The table's live files as one bar: data files, then each kind of delete file (slots 0 to 3)."""
    deletes = health.get("delete_files") or {}
    # Each part named by its noun in the singular (the page counts it).
    parts = [
        ("data file", health.get("data_files")),
        ("position delete file", deletes.get("position")),
        ("equality delete file", deletes.get("equality")),
        ("deletion vector", deletes.get("deletion_vector")),
    ]
    counts = [(name, float(n)) for name, n in parts if isinstance(n, int | float)]
    total = sum(n for _, n in counts)
    if total <= 0:
        return []
    return [Segment(name, n, round(n / total * 100, 2), i) for i, (name, n) in enumerate(counts) if n > 0]


def delete_ratio(health: Mapping[str, Any]) -> float | None:
    """Delete files per live file (data and delete files), 0 to 1; None without the figures."""
    data = health.get("data_files")
    deletes = health.get("delete_files") or {}
    count = sum(v for v in deletes.values() if isinstance(v, int | float))
    if not isinstance(data, int | float) or data + count <= 0:
        return None
    return count / (data + count)


def reclaimed_bytes(run: RunRecord) -> int | None:
    """Bytes a run removed (a dry run: would have removed): ``deleted_bytes``, else an orphan run's ``orphan_bytes``."""
    for key in ("deleted_bytes", "orphan_bytes"):
        if key in run.counts:
            return run.counts[key]
    return None


def removed_files(run: RunRecord) -> int | None:
    """Files a run removed; a dry run: the orphan files it would have removed."""
    if run.dry_run and "orphan_file_count" in run.counts:
        return run.counts["orphan_file_count"]
    return run.counts.get("deleted_file_count")
