"""Each operator's ``execute`` against a real SQLite catalog reached through ``AIRFLOW_CONN_ICEBERG_DEFAULT``.

State goes to a SQL store (``state_url``) here; the Airflow Variable store is exercised by
the DAG runs in test_dags_e2e.py.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pyarrow as pa
import pytest
from airflow.sdk import Context
from airflow.sdk.exceptions import AirflowFailException
from pyiceberg.catalog.sql import SqlCatalog

from airflow_iceberg_maint.airflow.operators.maintenance_planning import IcebergMaintenancePlanOperator
from airflow_iceberg_maint.airflow.operators.orphan_planning import IcebergOrphanPolicyExpansionOperator
from airflow_iceberg_maint.airflow.operators.orphans import IcebergRemoveOrphanFilesOperator
from airflow_iceberg_maint.state.cleanup import SqlStateStore, record_attempt
from tests.airflow.helpers import pushed
from tests.support.airflow_dags import DAGS, remover

SUMMARY_KEYS = {
    "table",
    "table_uuid",
    "policy",
    "location",
    "older_than",
    "dry_run",
    "orphan_file_count",
    "orphan_bytes",
    "deleted_file_count",
    "failed_count",
    "conflict_count",
    "files_listed",
    "list_calls",
    "phase_seconds",
    "report",
    "protected_location_count",
    "kept_undecodable_count",
}


def test_removal_deletes_exactly_the_old_orphan(
    demo_tables: dict, catalog: SqlCatalog, state_url: str, tmp_path: Path, context: Context
) -> None:
    planted = demo_tables["demo.orders"]
    summary = remover(state_url, tmp_path, table="demo.orders").execute(context)

    assert not planted["old"].exists() and planted["fresh"].exists()
    assert demo_tables["demo.events"]["old"].exists()
    assert catalog.load_table("demo.orders").scan().to_arrow().num_rows == 3
    assert set(summary) == SUMMARY_KEYS
    assert summary["orphan_file_count"] == summary["deleted_file_count"] == 1
    assert summary["failed_count"] == 0 and summary["dry_run"] is False
    assert summary["report"] == f"file://{tmp_path}/reports/unit/manual__unit/demo.orders.json"
    report = json.loads(Path(summary["report"].removeprefix("file://")).read_text())
    assert report["orphan_files"] == [planted["old_uri"]]

    state = SqlStateStore(state_url).get(summary["table_uuid"])
    assert state.last_success_at is not None and state.last_attempt_counts["deleted_file_count"] == 1


def test_removal_logs_its_phases_in_the_task_log(
    demo_tables: dict, state_url: str, tmp_path: Path, context: Context, capsys: pytest.CaptureFixture[str]
) -> None:
    summary = remover(state_url, tmp_path, table="demo.orders").execute(context)
    out = capsys.readouterr().out
    listed = summary["files_listed"]
    for line in [
        "listing: 0, started",
        f"listing: {listed}, done",
        "reading manifests: 0, started",
        "deleting: 0 of 1, started",
        "deleting: 1 of 1, done",
    ]:
        assert line in out, line


def test_retry_is_safe(demo_tables: dict, state_url: str, tmp_path: Path, context: Context) -> None:
    first = remover(state_url, tmp_path, table="demo.orders").execute(context)
    again = remover(state_url, tmp_path, table="demo.orders").execute(context)
    assert first["deleted_file_count"] == 1
    assert again["orphan_file_count"] == again["deleted_file_count"] == 0


def test_dry_run_from_rendered_strings_deletes_nothing_and_keeps_the_clock(
    demo_tables: dict, state_url: str, tmp_path: Path, context: Context
) -> None:
    planted = demo_tables["demo.orders"]
    # What "{{ params.x }}" renders to without native rendering.
    summary = remover(
        state_url,
        tmp_path,
        table="demo.orders",
        older_than_days="3",
        location="None",
        dry_run="True",
        max_concurrent_deletes="4",
        equal_schemes="s3a=s3",
    ).execute(context)
    assert planted["old"].exists()
    assert summary["dry_run"] is True
    assert summary["orphan_file_count"] == 1 and summary["deleted_file_count"] == 0
    state = SqlStateStore(state_url).get(summary["table_uuid"])
    assert state.last_success_at is None and state.last_attempt_dry_run is True


def test_older_than_and_location_arguments(demo_tables: dict, state_url: str, tmp_path: Path, context: Context) -> None:
    planted = demo_tables["demo.orders"]
    table_dir = planted["old"].parent.parent
    cutoff = (datetime.now(UTC) - timedelta(days=20)).isoformat()
    none_old_enough = remover(state_url, tmp_path, table="demo.orders", older_than=cutoff).execute(context)
    assert none_old_enough["orphan_file_count"] == 0 and planted["old"].exists()
    scoped = remover(state_url, tmp_path, table="demo.orders", location=f"file://{table_dir}/data").execute(context)
    assert scoped["location"] == f"file://{table_dir}/data"
    assert scoped["deleted_file_count"] == 1 and not planted["old"].exists()


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"table": "demo.missing"}, "table 'demo.missing': not found"),
        ({"table": "demo.orders", "location": "file:///etc"}, "location 'file:///etc'"),
        ({"table": "demo.orders", "older_than_days": "-1"}, "argument older_than_days: expected a number of days >= 1"),
        ({"table": "demo.orders", "dry_run": "maybe"}, "argument dry_run: expected true or false"),
        ({"table": "demo.orders", "older_than": "2026-01-01T00:00:00"}, "needs a time zone"),
    ],
)
def test_bad_arguments_fail_without_retry_and_delete_nothing(
    demo_tables: dict, state_url: str, tmp_path: Path, context: Context, kwargs: dict, message: str
) -> None:
    with pytest.raises(AirflowFailException) as caught:
        remover(state_url, tmp_path, **kwargs).execute(context)
    assert message in str(caught.value)
    assert demo_tables["demo.orders"]["old"].exists()


def test_location_of_another_table_is_refused(
    demo_tables: dict, state_url: str, tmp_path: Path, context: Context
) -> None:
    other = demo_tables["demo.events"]["old"].parent.parent
    with pytest.raises(AirflowFailException, match="is not under the table location"):
        remover(state_url, tmp_path, table="demo.orders", location=f"file://{other}").execute(context)
    assert demo_tables["demo.events"]["old"].exists()


def test_gc_disabled_is_refused_and_recorded_as_a_failed_attempt(
    demo_tables: dict, catalog: SqlCatalog, state_url: str, tmp_path: Path, context: Context
) -> None:
    table = catalog.load_table("demo.orders")
    with table.transaction() as tx:
        tx.set_properties({"gc.enabled": "false"})
    with pytest.raises(AirflowFailException, match=r"gc\.enabled=false"):
        remover(state_url, tmp_path, table="demo.orders").execute(context)
    assert demo_tables["demo.orders"]["old"].exists()
    state = SqlStateStore(state_url).get(str(table.metadata.table_uuid))
    assert state.last_attempt_status == "failed" and "gc.enabled=false" in state.last_error
    assert state.last_success_at is None


def test_report_inside_the_table_is_refused(demo_tables: dict, state_url: str, context: Context) -> None:
    table_dir = demo_tables["demo.orders"]["old"].parent.parent
    operator = IcebergRemoveOrphanFilesOperator(
        task_id="remove", table="demo.orders", state_url=state_url, report_location=f"file://{table_dir}/reports"
    )
    with pytest.raises(AirflowFailException, match="is inside the table location"):
        operator.execute(context)


def test_expansion_returns_jobs_for_due_tables_only(
    demo_tables: dict, catalog: SqlCatalog, state_url: str, context: Context
) -> None:
    events_uuid = str(catalog.load_table("demo.events").metadata.table_uuid)
    record_attempt(
        SqlStateStore(state_url),
        table_uuid=events_uuid,
        table="demo.events",
        at=datetime.now(UTC) - timedelta(days=2),
        dry_run=False,
        succeeded=True,
    )
    catalog.create_namespace("other")
    catalog.create_table("other.untouched", pa.schema([("id", pa.int64())]))

    expand = IcebergOrphanPolicyExpansionOperator(
        task_id="plan", policy_file=str(DAGS / "iceberg_maint_policies.yaml"), state_url=state_url
    )
    jobs = expand.execute(context)

    orders_dir = demo_tables["demo.orders"]["old"].parent.parent
    assert [job["table"] for job in jobs] == ["demo.orders"]
    [job] = jobs
    assert job["location"] == f"file://{orders_dir}"
    assert job["dry_run"] is False and job["policy"] == "remove_orphans_weekly"
    cutoff = datetime.fromisoformat(job["older_than"])
    assert timedelta(days=3) <= datetime.now(UTC) - cutoff < timedelta(days=3, minutes=1)
    evaluations = {e["table"]: e for e in pushed(context)["evaluations"]}
    assert set(evaluations) == {"demo.orders", "demo.events"}
    assert evaluations["demo.orders"]["reason"] == "never cleaned: due"
    assert evaluations["demo.events"]["due"] is False
    assert evaluations["demo.events"]["reason"] == "last cleaned 2 days ago, interval 7 days: not due"


def test_expansion_feeds_the_removal_operator(
    demo_tables: dict, state_url: str, tmp_path: Path, context: Context
) -> None:
    jobs = IcebergOrphanPolicyExpansionOperator(
        task_id="plan", policy_file=str(DAGS / "iceberg_maint_policies.yaml"), state_url=state_url
    ).execute(context)
    summaries = [remover(state_url, tmp_path, **job).execute(context) for job in jobs]
    assert sorted(s["table"] for s in summaries) == ["demo.events", "demo.orders"]
    assert all(s["deleted_file_count"] == 1 and s["policy"] == "remove_orphans_weekly" for s in summaries)
    assert not any(planted["old"].exists() for planted in demo_tables.values())


def test_a_policys_memory_budget_and_listing_reach_the_removal_run(
    demo_tables: dict, state_url: str, tmp_path: Path, context: Context
) -> None:
    policy = "name: small\ntype: system_iceberg_orphan_file_removal\ntables: ['demo.*']\ncontent: {olderThanDays: 3, "
    with_listing = tmp_path / "with-listing.yaml"  # planned only: a local table is never read from an inventory
    with_listing.write_text(policy + "memoryBudgetMb: 1, listing: /inventories/listing.parquet}\n")
    plan = {"task_id": "plan", "policy_file": str(with_listing), "state_url": state_url}
    items = IcebergMaintenancePlanOperator(**plan).execute(context)  # the scheduled maintenance flow's plan
    assert sorted((i["table"], i["memory_budget_mb"], i["listing"]) for i in items) == [
        ("demo.events", 1, "/inventories/listing.parquet"),
        ("demo.orders", 1, "/inventories/listing.parquet"),
    ]
    policy_file = tmp_path / "policies.yaml"
    policy_file.write_text(policy + "memoryBudgetMb: 1}\n")
    plan["policy_file"] = str(policy_file)
    jobs = IcebergOrphanPolicyExpansionOperator(**plan).execute(context)
    assert [job["memory_budget_mb"] for job in jobs] == [1, 1]

    removers = [remover(state_url, tmp_path, **job) for job in jobs]
    assert [r._prepare(context).options.memory_budget_mb for r in removers] == [1, 1]
    summaries = [r.execute(context) for r in removers]  # a 1 MB budget: the same result
    assert [s["deleted_file_count"] for s in summaries] == [1, 1]
    assert not any(planted["old"].exists() for planted in demo_tables.values())


@pytest.mark.parametrize(
    ("policy_text", "message"),
    [
        (
            "name: p\ntype: system_iceberg_orphan_file_removal\ntables: ['demo.gone']\n",
            "policy 'p' attaches table 'demo.gone', which is not in catalog",
        ),
        ("name: p\ntype: system_iceberg_orphan_file_removal\ncontent: {olderThanDays: -3}\n", "content.olderThanDays"),
        (
            "name: p\ntype: system_iceberg_orphan_file_removal\ntables: ['demo.*']\n"
            "content: {location: 'file:///tmp'}\n",
            "location 'file:///tmp'",
        ),
    ],
)
def test_expansion_failures_name_the_cause(
    demo_tables: dict, state_url: str, tmp_path: Path, context: Context, policy_text: str, message: str
) -> None:
    policy_file = tmp_path / "policies.yaml"
    policy_file.write_text(policy_text)
    expand = IcebergOrphanPolicyExpansionOperator(task_id="plan", policy_file=str(policy_file), state_url=state_url)
    with pytest.raises(AirflowFailException) as caught:
        expand.execute(context)
    assert message in str(caught.value)


def test_cleanup_clock_is_the_schedule_tick(
    demo_tables: dict, state_url: str, tmp_path: Path, context: Context
) -> None:
    tick = datetime.now(UTC).replace(microsecond=0) - timedelta(minutes=3)
    summary = remover(state_url, tmp_path, table="demo.orders").execute({**context, "logical_date": tick})
    assert SqlStateStore(state_url).get(summary["table_uuid"]).last_success_at == tick
