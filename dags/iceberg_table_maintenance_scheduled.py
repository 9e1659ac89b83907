"""Daily: maintain each due table in order: compact it, expire its snapshots, then remove its orphan files.

``plan_due_tables`` reads ``iceberg_maint_policies.yaml`` next to this file and evaluates every
attached table for each kind of policy: ``system_iceberg_data_compaction`` ("days since last
compaction"), ``system_iceberg_snapshot_expiry`` ("days since last expiry") and
``system_iceberg_orphan_file_removal`` ("days since last cleanup"). It returns one item per table
due for any; the ``maintain_table`` group runs once per item (dynamic task mapping, each mapped
group named after its table) in the ``iceberg_maint`` pool:

1. ``rewrite_data_files``: the table's compaction, skipped when the table is not due for it;
2. ``rewrite_manifests``: its manifests regrouped by partition, with the compaction (same policy);
3. ``expire_snapshots``: its expiry, skipped when the table is not due for expiry;
4. ``remove_orphan_files``: its orphan removal, skipped when not due for it.

Each step runs when the steps before it succeeded or were skipped (trigger rule ``none_failed``):
a step that fails (after its retries) stops the table's later steps in that run; the other tables
go on. Compaction first, so that the expiry can expire the snapshots the rewrite replaced once they
are old enough; expiry before the orphan scan, because what it leaves after a failed delete is an
orphan the last step removes, and the scan then lists a table without the files of expired snapshots.

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

from airflow_iceberg_maint.airflow.operators.compaction import (
    IcebergRewriteDataFilesOperator,
    IcebergRewriteManifestsOperator,
)
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
        compact: bool,
        target_file_size_mb: float | None,
        min_input_files: int | None,
        strategy: str,
        compact_dry_run: bool,
        compact_policy: str | None,
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
        data_files = IcebergRewriteDataFilesOperator(
            task_id="rewrite_data_files",
            table=table,
            enabled=compact,
            target_file_size_mb=target_file_size_mb,
            min_input_files=min_input_files,
            strategy=strategy,
            dry_run=compact_dry_run,
            policy=compact_policy,
            map_index_template="{{ task.table }}",
            **retried,
        )
        manifests = IcebergRewriteManifestsOperator(
            task_id="rewrite_manifests",
            table=table,
            enabled=compact,
            dry_run=compact_dry_run,
            policy=compact_policy,
            trigger_rule="none_failed",
            map_index_template="{{ task.table }}",
            **retried,
        )
        expiry = IcebergExpireSnapshotsOperator(
            task_id="expire_snapshots",
            table=table,
            enabled=expire,
            older_than=expire_older_than,
            retain_last=retain_last,
            dry_run=expire_dry_run,
            policy=expire_policy,
            trigger_rule="none_failed",
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
        data_files >> manifests >> expiry >> orphans

    maintain_table.expand_kwargs(plan.output)
