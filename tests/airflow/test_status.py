"""The status page's rows from stored records, the records the tasks write, and the report's stages."""

from __future__ import annotations

import json
import logging
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from airflow.sdk import Context
from airflow.sdk.exceptions import AirflowFailException
from pyiceberg.catalog.sql import SqlCatalog

from airflow_iceberg_maint.airflow.operators.index_definitions import IcebergIndexLagPlanOperator
from airflow_iceberg_maint.index.lifecycle.references import INDEX_FILES
from airflow_iceberg_maint.orphans.removal import remove_orphan_files
from airflow_iceberg_maint.orphans.report import OrphanReport
from airflow_iceberg_maint.policy.index_definitions import load_index_definitions
from airflow_iceberg_maint.policy.policies import parse_policies
from airflow_iceberg_maint.policy.status_rows import Records, table_rows
from airflow_iceberg_maint.state.cleanup import SqlStateStore, record_attempt
from airflow_iceberg_maint.state.status_records import (
    RUN_HISTORY_LIMIT,
    RunRecord,
    SqlRecords,
    index_lag_key,
    record_run,
)
from tests.support.airflow_dags import DAGS, remover

NOW = datetime(2026, 6, 10, 12, tzinfo=UTC)
POLICIES = parse_policies(
    [
        {
            "name": "weekly",
            "type": "system_iceberg_orphan_file_removal",
            "minIntervalDays": 7,
            "tables": ["demo.*", "sales.orders"],
            "content": {},
        },
    ]
)


def test_rows_come_from_records_and_files_only(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/state.db"
    store = SqlStateStore(url)
    record_attempt(
        store,
        table_uuid="u-events",
        table="demo.events",
        at=NOW - timedelta(days=8),
        dry_run=False,
        succeeded=True,
        counts={"orphan_file_count": 2, "orphan_bytes": 128, "deleted_file_count": 2, "failed_count": 0},
        report="s3://ops/r/demo.events.json",
    )
    record_attempt(
        store,
        table_uuid="u-manual",
        table="other.t",
        at=NOW - timedelta(days=1),
        dry_run=True,
        succeeded=False,
        error="table 'other.t': gc.enabled=false",
    )
    records = SqlRecords(url)
    lag = {
        "index": "events_by_id",
        "snapshots_behind": 3,
        "lag_seconds": 42.0,
        "lagging": True,
        "reasons": ["3 snapshot(s) behind > 0"],
        "checked_at": NOW.isoformat(),
    }
    records.put(index_lag_key("demo.events"), {"table": "demo.events", "indexes": {"events_by_id": lag}}, "")
    records.put(
        "iceberg_maint.policy_tables",
        {"checked_at": NOW.isoformat(), "tables": {"demo.events": "u-events", "demo.orders": "u-orders"}},
        "",
    )
    rows = table_rows(
        POLICIES,
        load_index_definitions(DAGS / "iceberg_indexes.yaml"),
        Records.build(store.all(), records.items()),
        NOW,
    )
    body = {r.table: r.to_json() for r in rows}
    assert list(body) == ["demo.events", "demo.orders", "other.t", "sales.orders"]
    events = body["demo.events"]
    assert (events["policy"], events["due"], events["days_since_last_cleanup"]) == ("weekly", True, 8.0)
    assert events["last_run"] == {
        "at": (NOW - timedelta(days=8)).isoformat(),
        "dry_run": False,
        "status": "success",
        "counts": {"orphan_file_count": 2, "orphan_bytes": 128, "deleted_file_count": 2, "failed_count": 0},
        "error": None,
        "report": "s3://ops/r/demo.events.json",
        "started_at": None,  # recorded before runs kept their own times: shown at the state's clock
        "finished_at": None,
    }
    assert events["indexes"] == [
        {"name": "events_by_id", "lag": lag, "history": []},
        {"name": "events_by_kind", "lag": None, "history": []},
    ]
    assert (body["demo.orders"]["due"], body["demo.orders"]["reason"]) == (True, "never cleaned: due")
    assert body["other.t"]["policy"] is None and body["other.t"]["due"] is False
    assert body["other.t"]["last_run"]["error"] == "table 'other.t': gc.enabled=false"
    assert body["sales.orders"]["last_run"] is None


def test_a_table_cleaned_by_a_manual_run_is_not_never_cleaned(tmp_path: Path) -> None:
    """No policy attaches ``other.t``: it is not due, yet its last cleanup is the manual run's, and its
    run history holds that run (recorded before the history existed: from the state)."""
    store = SqlStateStore(f"sqlite:///{tmp_path}/state.db")
    counts = {"orphan_file_count": 2, "orphan_bytes": 96, "deleted_file_count": 2, "failed_count": 0}
    at = NOW - timedelta(days=2)
    record_attempt(store, table_uuid="u", table="other.t", at=at, dry_run=False, succeeded=True, counts=counts)
    (row,) = [
        r.to_json() for r in table_rows(POLICIES, [], Records.build(store.all(), []), NOW) if r.table == "other.t"
    ]
    assert (row["policy"], row["due"], row["last_cleaned_at"], row["days_since_last_cleanup"]) == (
        None,
        False,
        at.isoformat(),
        2.0,
    )
    assert row["last_run"]["at"] == row["last_cleaned_at"]
    assert [(r["kind"], r["at"], r["counts"]) for r in row["runs"]] == [("orphans", at.isoformat(), counts)]


def test_runs_of_every_kind_are_kept_in_order(tmp_path: Path) -> None:
    """The history holds runs of any kind, oldest first, the last ``RUN_HISTORY_LIMIT``; a kind the page
    does not know (an expiry run) is kept as it is."""
    records = SqlRecords(f"sqlite:///{tmp_path}/state.db")
    log = logging.getLogger("test")
    for day in range(RUN_HISTORY_LIMIT + 2):
        run = RunRecord(
            "orphans", (NOW + timedelta(days=day)).isoformat(), False, "success", {"deleted_file_count": day}
        )
        record_run(records, "demo.events", run, log)
    expiry = RunRecord(
        "expiry", (NOW + timedelta(days=90)).isoformat(), False, "success", {"expired_snapshot_count": 4}
    )
    record_run(records, "demo.events", expiry, log)
    (row,) = table_rows([], [], Records.build([], records.items()), NOW + timedelta(days=91))
    runs = row.to_json()["runs"]
    assert len(runs) == RUN_HISTORY_LIMIT
    assert [r["counts"] for r in runs[-2:]] == [
        {"deleted_file_count": RUN_HISTORY_LIMIT + 1},
        {"expired_snapshot_count": 4},
    ]
    assert [r["kind"] for r in runs] == ["orphans"] * (RUN_HISTORY_LIMIT - 1) + ["expiry"]
    # The Last run column reads the history too: the last orphan-removal run, not the expiry after it.
    assert row.to_json()["last_run"]["counts"] == {"deleted_file_count": RUN_HISTORY_LIMIT + 1}


def test_a_hand_edited_record_is_skipped() -> None:
    records = Records.from_variables(
        [
            ("iceberg_maint.index_lag.demo.events", "{not json"),
            ("iceberg_maint.state.system_iceberg_orphan_file_removal.x", "[]"),
        ]
    )
    assert records == Records()


def test_lag_plan_records_every_lag(catalog: SqlCatalog, tmp_path: Path, context: Context) -> None:
    import pyarrow as pa

    catalog.create_namespace("demo")
    catalog.create_table("demo.events", pa.schema([("id", pa.int64()), ("kind", pa.string())])).append(
        pa.table({"id": [1], "kind": ["a"]})
    )
    url = f"sqlite:///{tmp_path}/state.db"
    from airflow_iceberg_maint.airflow.operators.index_definitions import IcebergCreateMissingIndexesOperator

    IcebergCreateMissingIndexesOperator(task_id="c", definitions_file=str(DAGS / "iceberg_indexes.yaml")).execute(
        context
    )
    IcebergIndexLagPlanOperator(
        task_id="p", definitions_file=str(DAGS / "iceberg_indexes.yaml"), state_url=url
    ).execute(context)
    stored = SqlRecords(url).get(index_lag_key("demo.events"))
    assert sorted(stored["indexes"]) == ["events_by_id", "events_by_kind"]
    assert {(i["snapshots_behind"], i["lagging"], i["reasons"][0]) for i in stored["indexes"].values()} == {
        (1, True, "no extract yet")
    }


def test_report_is_saved_before_anything_is_deleted(demo_tables: dict, catalog: SqlCatalog) -> None:
    table = catalog.load_table("demo.orders")
    planted = demo_tables["demo.orders"]
    seen: list[tuple[str, list[str], bool]] = []

    def progress(report: OrphanReport, stage: str) -> None:
        seen.append((stage, list(report.orphan_files), planted["old"].exists()))

    remove_orphan_files(table, sources=[INDEX_FILES], on_stage=progress)
    assert seen == [("matched", [planted["old_uri"]], True), ("planned", [planted["old_uri"]], True)]
    assert not planted["old"].exists()


def test_operator_report_has_its_stage(demo_tables: dict, state_url: str, tmp_path: Path, context: Context) -> None:
    summary = remover(state_url, tmp_path, table="demo.orders", dry_run=True).execute(context)
    body = json.loads(Path(summary["report"].removeprefix("file://")).read_text())
    assert (body["stage"], body["error"]) == ("done", None)
    assert body["orphan_files"] == [demo_tables["demo.orders"]["old_uri"]]
    assert SqlStateStore(state_url).get(summary["table_uuid"]).last_report == summary["report"]


def test_report_base_inside_a_table_is_refused(
    demo_tables: dict, catalog: SqlCatalog, state_url: str, tmp_path: Path, context: Context
) -> None:
    events = catalog.load_table("demo.events").location()
    operator = remover(state_url, tmp_path, table="demo.orders", only_this_table=True)
    operator.report_location = f"{catalog.load_table('demo.orders').location()}/reports"
    with pytest.raises(AirflowFailException, match=r"report location .*: is inside the table location"):
        operator.execute(context)
    assert demo_tables["demo.orders"]["old"].exists()
    from airflow_iceberg_maint.airflow.reports import refuse_inside_tables
    from airflow_iceberg_maint.reachability.other_tables import TablePaths

    paths = TablePaths.of("demo.events", catalog.load_table("demo.events").metadata)
    with pytest.raises(ValueError, match=f"is inside the table location '{events}' of demo.events"):
        refuse_inside_tables(f"{events}/data/reports", [paths])
