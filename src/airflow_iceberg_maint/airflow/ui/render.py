"""The Jinja environment of the status page: its templates, and the filters that turn figures into text.

Templates are autoescaped; every value reaches the page through them, so no markup is built in Python.
Every figure is worded by ``airflow.ui.wording`` (the approval form's too), so pages never differ in
units: bytes in binary units, counts with their noun, times as an age beside the UTC time.
"""

from __future__ import annotations

from datetime import UTC, datetime
from functools import cache
from typing import Any

from fastapi.responses import HTMLResponse
from jinja2 import Environment, PackageLoader

from airflow_iceberg_maint.airflow.ui import charts, wording
from airflow_iceberg_maint.state.status_records import JOB_KINDS, RunRecord


def when(value: str | datetime | None) -> str:
    """A time as ``2026-06-10 12:00:00 UTC`` (empty when unknown)."""
    moment = wording.parse_moment(value)
    return wording.absolute(moment) if moment else ""


def ago(value: str | datetime | None) -> str:
    """A time as its age from now: ``5 min ago`` (empty when unknown)."""
    moment = wording.parse_moment(value)
    return wording.relative(moment, datetime.now(UTC)) if moment else ""


def outcome(run: RunRecord) -> str:
    """What a run did, in words."""
    if run.status == "failed":
        return f"failed: {run.error or 'no message'}"
    return wording.outcome(run.kind, run.dry_run, run.counts)


#: How the pages name each run kind and policy type (the legend's words).
KIND_NAMES = {
    "orphans": "orphan removal",
    "expiry": "snapshot expiry",
    "compaction": "compaction",
    "manifests": "manifest rewrite",
}


def kind_name(kind: str) -> str:
    return KIND_NAMES.get(kind, kind)


def policy_type(name: str) -> str:
    return kind_name(JOB_KINDS.get(name, name))


@cache
def environment() -> Environment:
    loader = PackageLoader("airflow_iceberg_maint.airflow.ui", "templates")
    env = Environment(loader=loader, autoescape=True, trim_blocks=True, lstrip_blocks=True)
    env.filters.update(
        size=wording.size,
        when=when,
        ago=ago,
        outcome=outcome,
        kind_name=kind_name,
        policy_type=policy_type,
        duration=wording.duration,
    )
    env.globals.update(
        plural=wording.plural,
        lag_words=wording.lag,
        run_bars=lambda runs, figure: charts.run_bars(
            runs, charts.reclaimed_bytes if figure == "bytes" else charts.removed_files, _text(figure), when
        ),
        lag_bars=lambda history: charts.lag_bars(history, when),
        score_bars=lambda history: charts.score_bars(history, when),
        score_band=charts.score_band,
        histogram_bars=charts.histogram_bars,
        delete_segments=charts.delete_segments,
        delete_ratio=charts.delete_ratio,
        phase_segments=charts.phase_segments,
    )
    return env


def _text(figure: str) -> Any:
    return wording.size if figure == "bytes" else lambda value: wording.plural(round(value, 1), "file")


def page(template: str, status_code: int = 200, **context: Any) -> HTMLResponse:
    return HTMLResponse(environment().get_template(template).render(**context), status_code=status_code)
