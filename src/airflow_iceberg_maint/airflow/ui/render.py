"""The Jinja environment of the status page: its templates, and the filters that turn figures into text.

Templates are autoescaped; every value reaches the page through them, so no markup is built in Python.
"""

from __future__ import annotations

from functools import cache
from typing import Any

from fastapi.responses import HTMLResponse
from jinja2 import Environment, PackageLoader

from airflow_iceberg_maint.airflow.ui import charts
from airflow_iceberg_maint.state.status_records import ORPHANS_KIND, RunRecord


def size(count: float) -> str:
    """Bytes as text: ``512 B``, ``1.5 KiB``..."""
    value = float(count)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if value < 1024 or unit == "TiB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return str(count)


def when(iso: str | None) -> str:
    """An ISO 8601 time as ``2026-06-10 12:00:00 UTC`` (empty when unknown)."""
    return iso[:19].replace("T", " ") + " UTC" if iso else ""


def outcome(run: RunRecord) -> str:
    """What a run did, in words: an orphan run's files and bytes, any other kind's figures as recorded."""
    if run.status == "failed":
        return f"failed: {run.error or 'no message'}"
    counts = run.counts
    if run.kind == ORPHANS_KIND:
        found = size(counts.get("orphan_bytes", 0))
        if run.dry_run:
            return f"would delete {counts.get('orphan_file_count', 0)} files ({found})"
        return f"deleted {counts.get('deleted_file_count', 0)} files ({found} reclaimed)"
    figures = [f"{key.replace('_', ' ')} {value}" for key, value in counts.items()]
    if "deleted_bytes" in counts:
        figures = [f for f in figures if not f.startswith("deleted bytes")] + [
            f"{size(counts['deleted_bytes'])} reclaimed"
        ]
    return ("would: " if run.dry_run else "") + (", ".join(figures) or "done")


@cache
def environment() -> Environment:
    loader = PackageLoader("airflow_iceberg_maint.airflow.ui", "templates")
    env = Environment(loader=loader, autoescape=True, trim_blocks=True, lstrip_blocks=True)
    env.filters.update(size=size, when=when, outcome=outcome)
    env.globals.update(
        run_bars=lambda runs, figure: charts.run_bars(
            runs, charts.reclaimed_bytes if figure == "bytes" else charts.removed_files, _text(figure), when
        ),
        lag_bars=lambda history: charts.lag_bars(history, when),
        phase_segments=charts.phase_segments,
    )
    return env


def _text(figure: str) -> Any:
    return size if figure == "bytes" else lambda value: f"{value:g} files"


def page(template: str, status_code: int = 200, **context: Any) -> HTMLResponse:
    return HTMLResponse(environment().get_template(template).render(**context), status_code=status_code)
