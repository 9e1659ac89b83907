"""Daily: maintain each due table in order: expire its snapshots, then remove its orphan files.

``plan_due_tables`` reads ``iceberg_maint_policies.yaml`` next to this file and evaluates every
attached table for both kinds of policy: ``system_iceberg_snapshot_expiry`` ("days since last
expiry") and ``system_iceberg_orphan_file_removal`` ("days since last cleanup"). It returns one
item per table due for either; the ``maintain_table`` group runs once per item (dynamic task
mapping, each mapped group named after its table) in the ``iceberg_maint`` pool:

1. ``expire_snapshots``: the table's expiry, skipped when the table is not due for expiry;
2. ``remove_orphan_files``: its orphan removal, skipped when not due for it. It runs when the
   expiry succeeded or was skipped (trigger rule ``none_failed``): a table whose expiry fails
   (after its retries) is not scanned for orphans in that run; the other tables go on.

Expiry first, because what it leaves after a failed delete is an orphan the second step removes,
and the scan then lists a table without the files of expired snapshots.

This DAG replaces ``iceberg_orphan_cleanup_scheduled`` for tables with both kinds of policy;
keep one of the two unpaused (the other DAG's orphan step would only find the table not due).
The sharded orphan scan stays in ``iceberg_orphan_cleanup_scheduled``.

Set up once: an ``iceberg`` connection ``iceberg_default`` and
``airflow pools set iceberg_maint 4 "Iceberg maintenance"``.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from airflow.sdk import DAG, CronTriggerTimetable, task_group

from airflow_iceberg_maint.airflow.operators.expiry import IcebergExpireSnapshotsOperator
from airflow_iceberg_maint.airflow.operators.maintenance_planning import IcebergMaintenancePlanOperator
from airflow_iceberg_maint.airflow.operators.orphans import IcebergRemoveOrphanFilesOperator

POLICY_FILE = Path(__file__).with_name("iceberg_maint_policies.yaml")

with DAG(
    dag_id="iceberg_table_maintenance_scheduled",
    schedule=CronTriggerTimetable("@daily", timezone="UTC"),
    start_date=datetime(2026, 1, 1),
    catchup=False,
    max_active_runs=1,
    tags=["iceberg", "maintenance"],
    doc_md=__doc__,
    # The plan's items reach the operators with their types (a bool stays a bool).
    render_template_as_native_obj=True,
):
    plan = IcebergMaintenancePlanOperator(task_id="plan_due_tables", policy_file=str(POLICY_FILE))
    retried: dict[str, Any] = {"pool": "iceberg_maint", "retries": 2, "retry_delay": timedelta(minutes=5)}

    @task_group
    def maintain_table(
        table: str,
        expire: bool,
        expire_older_than: str | None,
        retain_last: int | None,
        expire_dry_run: bool,
        expire_policy: str | None,
        remove_orphans: bool,
        older_than: str | None,
        location: str | None,
        dry_run: bool,
        policy: str | None,
        allow_recent_files: bool,
        other_tables_uri: str | None,
        memory_budget_mb: int | None,
        listing: str | None,
    ) -> None:
        expiry = IcebergExpireSnapshotsOperator(
            task_id="expire_snapshots",
            table=table,
            enabled=expire,
            older_than=expire_older_than,
            retain_last=retain_last,
            dry_run=expire_dry_run,
            policy=expire_policy,
            map_index_template="{{ task.table }}",
            **retried,
        )
        orphans = IcebergRemoveOrphanFilesOperator(
            task_id="remove_orphan_files",
            table=table,
            enabled=remove_orphans,
            older_than=older_than,
            location=location,
            dry_run=dry_run,
            policy=policy,
            allow_recent_files=allow_recent_files,
            other_tables_uri=other_tables_uri,
            memory_budget_mb=memory_budget_mb,
            listing=listing,
            trigger_rule="none_failed",
            map_index_template="{{ task.table }}",
            **retried,
        )
        expiry >> orphans

    maintain_table.expand_kwargs(plan.output)
