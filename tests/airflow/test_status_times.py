"""Times on the status page are when the work ran, never the run's logical date; equal times put real runs first.

A scheduled run's cleanup clock is its logical date (so weekly intervals do not drift), and the page
used to show that clock as the run's time: "last cleaned 02:00:15" for deletes made at 02:12:07.
The runs are made by the real operators against a real SQLite catalog, their logical date 12 minutes
before they run.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from airflow_iceberg_maint.airflow.plugin import report_page, status_json, status_page, table_page
from airflow_iceberg_maint.policy.status_rows import Records, table_rows
from airflow_iceberg_maint.state.cleanup import SqlStateStore
from airflow_iceberg_maint.state.status_records import RunRecord, SqlRecords, record_run
from tests.airflow.test_status_page import LOG, Elements
from tests.support.airflow_dags import remover

TABLE = "demo.orders"


def test_a_scheduled_run_shows_when_its_work_ran(
    demo_tables: dict, pages: str, tmp_path: Path, context: dict[str, Any]
) -> None:
    logical = datetime.now(UTC) - timedelta(minutes=12)
    context["logical_date"] = logical
    started = datetime.now(UTC)
    remover(pages, tmp_path, table=TABLE, dry_run=True).execute(context)
    context["ti"].run_id = "scheduled__real"
    real = remover(pages, tmp_path, table=TABLE, dry_run=False).execute(context)
    ended = datetime.now(UTC)

    (state,) = [s for s in SqlStateStore(pages).all() if s.table == TABLE]
    assert state.last_success_at == logical  # the clock the intervals count from is unchanged
    body = json.loads(bytes(status_json().body))
    orders = next(t for t in body["tables"] if t["table"] == TABLE)
    dry, done = orders["runs"]
    for run in (dry, done):
        assert run["at"] == logical.isoformat()  # the clock, kept in the record
        assert (
            started <= datetime.fromisoformat(run["started_at"]) <= datetime.fromisoformat(run["finished_at"]) <= ended
        )
    assert orders["last_cleaned_at"] == orders["last_run"]["at"] == done["finished_at"]

    page = Elements(bytes(status_page().body).decode())
    (row,) = [t for a, t in page.find("td", class_="last-run") if a.get("data-at") == done["finished_at"]]
    shown = datetime.fromisoformat(done["finished_at"]).strftime("%Y-%m-%d %H:%M:%S UTC")
    assert f"real run just now ({shown})" in row
    assert logical.strftime("%H:%M:%S") not in row
    # The charts too: the last bar of the table's bytes chart is the real run, at the time it ran.
    captions = [t for _, t in Elements(bytes(table_page(TABLE).body).decode()).find("figcaption")]
    assert captions[0].startswith("Bytes reclaimed per run") and captions[0].endswith(f"→ {shown}")
    # The report says when the run ran, too.
    report = Path(real["report"].removeprefix("file://"))
    written = json.loads(report.read_text())
    assert (written["started_at"], written["finished_at"]) == (done["started_at"], done["finished_at"])
    ran = Elements(bytes(report_page(real["report"]).body).decode()).find("p", id="ran")
    assert ran[0][1].startswith("Real run, ran just now (") and ran[0][1].endswith(f"to {shown}; finished")


def test_at_equal_times_a_dry_run_never_sorts_above_a_real_run(tmp_path: Path) -> None:
    records = SqlRecords(f"sqlite:///{tmp_path}/state.db")
    at = "2026-06-10T02:12:07+00:00"
    # Recorded real first, then a dry run finishing at the same instant (written with another offset).
    same = "2026-06-10T04:12:07+02:00"
    record_run(records, TABLE, RunRecord("orphans", at, False, "success", finished_at=at), LOG)
    record_run(records, TABLE, RunRecord("orphans", at, True, "success", finished_at=same), LOG)
    record_run(records, TABLE, RunRecord("expiry", at, True, "success", finished_at=at), LOG)
    (row,) = table_rows([], [], Records.build([], records.items()), datetime(2026, 6, 11, tzinfo=UTC))
    assert [(r.kind, r.dry_run) for r in row.runs][-1] == ("orphans", False)
    assert [r.dry_run for r in row.runs].index(False) == 2  # both dry runs first (oldest first)
    assert row.last_run is not None and not row.last_run.dry_run
