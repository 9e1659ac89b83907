"""``IcebergExpireSnapshotsOperator`` and the expiry planning against a real SQLite catalog.

The table is tests/expiry/history.py's (branches, a tag, overwrites, every kind of row delete,
statistics files); the deleted set is checked against that module's independent oracle.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from airflow.sdk import Context
from airflow.sdk.exceptions import AirflowFailException, AirflowSkipException
from pyiceberg.catalog.sql import SqlCatalog

from airflow_iceberg_maint.airflow.operators.expiry import IcebergExpireSnapshotsOperator
from airflow_iceberg_maint.airflow.operators.maintenance_planning import (
    IcebergExpiryPolicyExpansionOperator,
    IcebergMaintenancePlanOperator,
)
from airflow_iceberg_maint.policy.policies import SNAPSHOT_EXPIRY
from airflow_iceberg_maint.state.cleanup import SqlStateStore, record_attempt
from airflow_iceberg_maint.state.status_records import SqlRecords, runs_key
from tests.airflow.helpers import pushed
from tests.expiry.history import build_history, reachable
from tests.support.airflow_dags import DAGS

SUMMARY_KEYS = {
    "table",
    "table_uuid",
    "policy",
    "older_than",
    "retain_last",
    "dry_run",
    "expired_snapshot_count",
    "removed_ref_count",
    "deleted_file_count",
    "deleted_bytes",
    "failed_count",
    "kept_by_recheck",
    "kept_all_files",
    "committed",
    "phase_seconds",
    "approved",
    "not_approved_snapshot_count",
    "not_approved_file_count",
    "report",
}


def expirer(state_url: str, tmp_path: Path, **kwargs: Any) -> IcebergExpireSnapshotsOperator:
    return IcebergExpireSnapshotsOperator(
        task_id="expire", state_url=state_url, report_location=f"file://{tmp_path}/reports", **kwargs
    )


@pytest.fixture
def history(catalog: SqlCatalog):
    catalog.create_namespace("db")
    return build_history(catalog)


def test_expiry_deletes_exactly_what_only_expired_snapshots_reached(
    history, catalog: SqlCatalog, state_url: str, tmp_path: Path, context: Context, capsys: pytest.CaptureFixture[str]
) -> None:
    table = history.table
    every = {s.snapshot_id for s in table.metadata.snapshots}
    kept = {history.ids["a4"], history.ids["b1"], history.ids["pos"]}
    reachable_before = reachable(table)
    cutoff = datetime.now(UTC).isoformat()

    dry = expirer(state_url, tmp_path, table="db.events", older_than=cutoff, retain_last="1", dry_run="true")
    dry_summary = dry.execute(context)
    assert {s.snapshot_id for s in catalog.load_table("db.events").metadata.snapshots} == every

    summary = expirer(state_url, tmp_path, table="db.events", older_than=cutoff, retain_last=1).execute(context)

    assert set(summary) == SUMMARY_KEYS
    after = catalog.load_table("db.events")
    assert {s.snapshot_id for s in after.metadata.snapshots} == kept
    oracle = reachable_before - reachable(after)
    report = json.loads(Path(summary["report"].removeprefix("file://")).read_text())
    assert summary["report"] == f"file://{tmp_path}/reports/unit/manual__unit/db.events.expiry.json"
    assert report["stage"] == "done"
    assert set(report["deleted_files"]) == oracle
    assert report["expired_snapshot_ids"] == sorted(every - kept)
    assert not any(Path(p.removeprefix("file://")).exists() for p in oracle)
    assert summary["expired_snapshot_count"] == len(every - kept) == dry_summary["expired_snapshot_count"]
    assert summary["deleted_file_count"] == len(oracle) == dry_summary["deleted_file_count"]
    assert summary["deleted_bytes"] == dry_summary["deleted_bytes"] > 0
    assert (summary["failed_count"], summary["committed"], summary["dry_run"]) == (0, True, False)
    assert dry_summary["committed"] is False and dry_summary["dry_run"] is True

    out = capsys.readouterr().out
    assert f"table db.events: expired {len(every - kept)} snapshots older than" in out
    assert f"deleted {len(oracle)} files, {summary['deleted_bytes']} bytes" in out

    state = SqlStateStore(state_url).get(summary["table_uuid"], SNAPSHOT_EXPIRY)
    assert state is not None and state.last_success_at is not None
    assert state.last_attempt_counts == {
        "expired_snapshot_count": len(every - kept),
        "deleted_file_count": len(oracle),
        "deleted_bytes": summary["deleted_bytes"],
        "failed_count": 0,
    }
    history = SqlRecords(state_url).get(runs_key("db.events"))
    assert history is not None
    record = history["runs"][-1]  # the real run, after the dry one
    assert record["kind"] == "expiry" and record["status"] == "success" and record["dry_run"] is False
    assert record["counts"] == state.last_attempt_counts
    assert record["report"] == summary["report"] and set(record["phase_seconds"]) == set(summary["phase_seconds"])

    # A retry of the same task expires and deletes nothing more, and keeps every snapshot it kept.
    again = expirer(state_url, tmp_path, table="db.events", older_than=cutoff, retain_last=1).execute(context)
    assert (again["expired_snapshot_count"], again["deleted_file_count"]) == (0, 0)
    assert {s.snapshot_id for s in catalog.load_table("db.events").metadata.snapshots} == kept


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"retain_last": "0"}, r"argument retain_last: expected a whole number >= 1, got '0'"),
        ({"older_than_days": "soon"}, r"argument older_than_days: expected a number, got 'soon'"),
        ({"older_than": "2999-01-01T00:00:00+00:00"}, r"older_than 2999-01-01T00:00:00\+00:00: is in the future"),
        ({"table": "db.nothing"}, r"db\.nothing"),
    ],
)
def test_bad_input_fails_without_retry_and_changes_nothing(
    history, state_url: str, tmp_path: Path, context: Context, kwargs: dict, message: str
) -> None:
    every = {s.snapshot_id for s in history.table.metadata.snapshots}
    with pytest.raises(AirflowFailException, match=message):
        expirer(state_url, tmp_path, **{"table": "db.events", **kwargs}).execute(context)
    history.table.refresh()
    assert {s.snapshot_id for s in history.table.metadata.snapshots} == every


def test_disabled_task_skips(state_url: str, tmp_path: Path, context: Context) -> None:
    with pytest.raises(AirflowSkipException, match=r"table db\.events: not due for snapshot expiry"):
        expirer(state_url, tmp_path, table="db.events", enabled="False").execute(context)


def test_expiry_planning_returns_due_tables_and_skips_recent_ones(
    demo_tables: dict, catalog: SqlCatalog, state_url: str, context: Context
) -> None:
    policy_file = str(DAGS / "iceberg_maint_policies.yaml")
    orders = str(catalog.load_table("demo.orders").metadata.table_uuid)
    now = datetime.now(UTC)
    at = now - timedelta(hours=1)
    record_attempt(
        SqlStateStore(state_url),
        table_uuid=orders,
        table="demo.orders",
        at=at,
        dry_run=False,
        succeeded=True,
        job=SNAPSHOT_EXPIRY,
    )
    jobs = IcebergExpiryPolicyExpansionOperator(task_id="plan", policy_file=policy_file, state_url=state_url).execute(
        context
    )
    assert [(j["table"], j["policy"], j["retain_last"], j["dry_run"]) for j in jobs] == [
        ("demo.events", "expire_snapshots_daily", 1, False)
    ]
    cutoff = datetime.fromisoformat(jobs[0]["older_than"])
    assert now - timedelta(days=5) <= cutoff <= datetime.now(UTC) - timedelta(days=5)
    reasons = {e["table"]: e["reason"] for e in pushed(context)["expiry_evaluations"]}
    assert reasons["demo.orders"].startswith("last expired 0.04 days ago, interval 1 day: not due")
    assert reasons["demo.events"] == "never expired: due"

    items = IcebergMaintenancePlanOperator(task_id="plan", policy_file=policy_file, state_url=state_url).execute(
        context
    )
    by_table = {i["table"]: i for i in items}
    assert set(by_table) == {"demo.orders", "demo.events"}
    assert (by_table["demo.events"]["expire"], by_table["demo.events"]["remove_orphans"]) == (True, True)
    assert (by_table["demo.orders"]["expire"], by_table["demo.orders"]["remove_orphans"]) == (False, True)
    assert by_table["demo.orders"]["expire_older_than"] is None
    assert by_table["demo.orders"]["policy"] == "remove_orphans_weekly"
    assert by_table["demo.events"]["expire_policy"] == "expire_snapshots_daily"
