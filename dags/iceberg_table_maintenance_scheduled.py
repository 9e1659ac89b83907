"""Daily: maintain each due table in order: compact it, expire its snapshots, then remove its orphan files.

``plan_due_tables`` reads ``iceberg_maint_policies.yaml`` next to this file and evaluates every
attached table for each kind of policy: ``system_iceberg_data_compaction`` ("days since last
compaction"), ``system_iceberg_snapshot_expiry`` ("days since last expiry") and
``system_iceberg_orphan_file_removal`` ("days since last cleanup"). It returns one item per table
due for any; the ``maintain_table`` group (``table_maintenance_group``) runs once per item (dynamic
task mapping, each mapped group named after its table) in the ``iceberg_maint`` pool:

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

from airflow.sdk import DAG, CronTriggerTimetable

from airflow_iceberg_maint.airflow.operators.maintenance_planning import IcebergMaintenancePlanOperator
from airflow_iceberg_maint.airflow.table_maintenance import table_maintenance_group

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

    maintain_table = table_maintenance_group(task_arguments=retried)
    maintain_table.expand_kwargs(plan.output)
