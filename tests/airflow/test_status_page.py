"""The status page's HTML from its templates: columns that agree, the run history with its kinds, and pictures.

The pages are rendered by their route functions from records in a SQLite ``state_url`` database (the
browser test covers them in a real api-server, behind Airflow's login).
"""

from __future__ import annotations

import json
import logging
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from html.parser import HTMLParser
from pathlib import Path

import pytest
from fastapi import HTTPException

from airflow_iceberg_maint.airflow.plugin import STATIC, report_page, status_json, status_page, table_page
from airflow_iceberg_maint.state.cleanup import SqlStateStore, record_attempt
from airflow_iceberg_maint.state.status_records import (
    RunRecord,
    SqlRecords,
    last_attempt,
    record_index_lags,
    record_run,
)

LOG = logging.getLogger(__name__)
NOW = datetime.now(UTC)
PHASES = {"list_and_reference": 0.25, "match": 0.5, "delete": 0.25}


class Elements(HTMLParser):
    """Every element's tag, attributes and text (its own and its children's), in document order."""

    def __init__(self, html: str) -> None:
        super().__init__()
        self.elements: list[tuple[str, dict[str, str], list[str]]] = []
        self._open: list[list[str]] = []
        self.feed(html)

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        text: list[str] = []
        self.elements.append((tag, {k: v or "" for k, v in attrs}, text))
        if tag not in ("rect", "link", "meta", "br", "input"):
            self._open.append(text)

    def handle_endtag(self, tag: str) -> None:
        if tag not in ("rect", "link", "meta", "br", "input") and self._open:
            self._open.pop()

    def handle_data(self, data: str) -> None:
        for text in self._open:
            text.append(data)

    def find(self, tag: str, **attrs: str) -> list[tuple[dict[str, str], str]]:
        return [
            (a, " ".join("".join(t).split()))
            for name, a, t in self.elements
            if name == tag and all(a.get(k.rstrip("_").replace("_", "-")) == v for k, v in attrs.items())
        ]


@pytest.fixture
def records(pages: str) -> SqlRecords:
    """``sales.orders`` (no policy attaches): a dry run, then two real runs and an expiry run; an index lag history
    of ``demo.events``; the sample policy and index-definition files."""
    url = pages
    store, records = SqlStateStore(url), SqlRecords(url)
    for day, dry_run in enumerate([True, False, False]):
        counts = {"orphan_file_count": 2, "orphan_bytes": 2048 * (day + 1), "deleted_file_count": 0 if dry_run else 2}
        state = record_attempt(
            store,
            table_uuid="u-orders",
            table="sales.orders",
            at=NOW - timedelta(days=3 - day),
            dry_run=dry_run,
            succeeded=True,
            counts={**counts, "failed_count": 0},
        )
        attempt = last_attempt(state)
        assert attempt is not None
        record_run(records, "sales.orders", replace(attempt, phase_seconds=PHASES), LOG)
    expiry = RunRecord("expiry", (NOW - timedelta(hours=1)).isoformat(), False, "success", {"deleted_bytes": 9000})
    record_run(records, "sales.orders", expiry, LOG)
    for behind in (0, 3):
        lag = {"index": "events_by_id", "snapshots_behind": behind, "lag_seconds": 1.0, "lagging": behind > 0}
        record_index_lags(records, "demo.events", [{**lag, "reasons": []}], NOW, LOG)
    return records


def test_every_column_of_a_row_agrees(records: SqlRecords) -> None:
    page = Elements(bytes(status_page().body).decode())
    (due,) = [a for a, _ in page.find("td", class_="due-cell") if "sales.orders" in a["title"]]
    (last_run,) = [(a, t) for a, t in page.find("td", class_="last-run") if a.get("data-at")]
    # Cleaned by a manual run, no policy attached: not due, yet cleaned when its last real run ran.
    assert due["data-last-cleaned"] == last_run[0]["data-at"] == (NOW - timedelta(days=1)).isoformat()
    assert "never cleaned" not in bytes(status_page().body).decode().split('data-table="sales.orders"')[1]
    # One wording: the age beside the UTC time, the noun in its number, bytes in binary units.
    ran = (NOW - timedelta(days=1)).strftime("%Y-%m-%d %H:%M:%S UTC")
    assert last_run[1] == f"real run 1 day ago ({ran}): deleted 2 orphan files (6.0 KiB reclaimed)"
    body = json.loads(bytes(status_json().body))
    orders = next(t for t in body["tables"] if t["table"] == "sales.orders")
    assert (orders["due"], orders["last_cleaned_at"], orders["last_run"]["at"]) == (
        False,
        last_run[0]["data-at"],
        last_run[0]["data-at"],
    )


def test_runs_of_every_kind_with_their_pictures(records: SqlRecords) -> None:
    page = Elements(bytes(table_page("sales.orders").body).decode())
    runs = page.find("tr", class_="run")
    assert [a["data-kind"] for a, _ in runs] == ["expiry", "orphans", "orphans", "orphans"]  # newest first
    assert (
        "deleted bytes" not in runs[0][1] and "expired 0 snapshots, deleted 0 files (8.8 KiB reclaimed)" in runs[0][1]
    )
    bars = [a["class"] for a, _ in page.find("rect") if a["class"].endswith(("orphans", "expiry"))]
    # Bytes reclaimed: four runs, oldest first (the dry run outlined); files removed: the orphan runs only.
    assert bars == [
        "dry kind-orphans",
        "real kind-orphans",
        "real kind-orphans",
        "real kind-expiry",
        "dry kind-orphans",
        "real kind-orphans",
        "real kind-orphans",
    ]
    segments = [a["title"] for a, _ in page.find("span") if a.get("class", "").startswith("phase phase-")]
    assert segments == ["list_and_reference: 0.25 s", "match: 0.5 s", "delete: 0.25 s"] * 3
    kinds = {a["class"] for a, _ in page.find("span") if a.get("class", "").startswith("badge ")}
    assert kinds == {"badge kind-orphans", "badge kind-expiry"}  # the legend's swatches have these classes too
    legend = {a["class"] for a, _ in page.find("span") if a.get("class", "").startswith("swatch kind-")}
    assert {"swatch kind-orphans", "swatch kind-expiry"} <= legend

    events = Elements(bytes(table_page("demo.events").body).decode())
    assert [a["class"] for a, _ in events.find("rect")] == ["ok", "lagging"]
    with pytest.raises(HTTPException, match=r"no table 'nowhere\.t'"):
        table_page("nowhere.t")


def test_report_timings_are_a_bar(records: SqlRecords, tmp_path: Path) -> None:
    uri = (tmp_path / "reports" / "dag" / "run" / "sales.orders.json").as_uri()
    path = Path(uri.removeprefix("file://"))
    path.parent.mkdir(parents=True)
    report = {"table": "sales.orders", "dry_run": True, "stage": "done", "orphan_files": ["file:///w/a.parquet"]}
    path.write_text(json.dumps({**report, "phase_seconds": PHASES, "by_kind": {"data": {"count": 1, "bytes": 10}}}))
    page = Elements(bytes(report_page(uri).body).decode())
    assert [t for _, t in page.find("ul", id="orphans")] == ["file:///w/a.parquet"]
    titles = [a["title"] for a, _ in page.find("span") if a.get("class", "").startswith("phase phase-")]
    assert titles == ["list_and_reference: 0.25 s", "match: 0.5 s", "delete: 0.25 s"]
    (timings,) = [t for _, t in page.find("div", id="timings")]
    assert "{" not in timings  # no raw JSON


def test_templates_and_static_files_are_package_data() -> None:
    pyproject = (Path(__file__).resolve().parents[2] / "pyproject.toml").read_text()
    assert '"airflow_iceberg_maint.airflow.ui" = ["templates/*.html", "static/*.css", "static/*.js"]' in pyproject
    assert sorted(p.name for p in STATIC.iterdir()) == ["frame.js", "style.css", "trigger.js"]
