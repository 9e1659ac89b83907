"""Daily: evaluate every table the policies attach, then remove orphans of the due ones.

``plan_due_tables`` reads ``iceberg_maint_policies.yaml`` next to this file and returns one
job per due table; ``remove_orphan_files`` runs once per job (dynamic task mapping) in the
``iceberg_maint`` pool, which caps how many tables are cleaned at once. A table cleaned less
than ``minIntervalDays`` ago is not due, so on most days nothing is mapped and the removal
task is skipped. Each run records its outcome in the cleanup state.

A policy's ``olderThanDays`` must be at least 1 (files younger may belong to writes in
progress) unless its content sets ``allowRecentFiles: true``; otherwise ``plan_due_tables``
fails without retries and nothing is deleted. The opt-in travels with each job as the
removal task's ``allow_recent_files``, and such a run logs a warning.

``ICEBERG_MAINT_ORPHAN_SHARDS`` (read when the DAG is parsed; default 1) above 1 spreads each
due table's scan over that many mapped tasks, for tables of many millions of files: a plan per
table, the shards and matches of every table, and one task per table that re-checks against
reloaded metadata and deletes. A failed shard fails the run before anything is deleted.

Set up once: an ``iceberg`` connection ``iceberg_default`` and
``airflow pools set iceberg_maint 4 "Iceberg maintenance"``.
"""

from __future__ import annotations

import os
from datetime import datetime, timedelta
from pathlib import Path

from airflow.sdk import DAG, CronTriggerTimetable

from airflow_iceberg_maint.airflow.operators.orphan_planning import IcebergOrphanPolicyExpansionOperator
from airflow_iceberg_maint.airflow.operators.orphans import IcebergRemoveOrphanFilesOperator
from airflow_iceberg_maint.airflow.sharded_orphan_removal import sharded_orphan_removal

POLICY_FILE = Path(__file__).with_name("iceberg_maint_policies.yaml")
SHARDS = int(os.environ.get("ICEBERG_MAINT_ORPHAN_SHARDS", "1"))

with DAG(
    dag_id="iceberg_orphan_cleanup_scheduled",
    schedule=CronTriggerTimetable("@daily", timezone="UTC"),
    start_date=datetime(2026, 1, 1),
    catchup=False,
    max_active_runs=1,
    tags=["iceberg", "maintenance"],
    doc_md=__doc__,
):
    plan = IcebergOrphanPolicyExpansionOperator(task_id="plan_due_tables", policy_file=str(POLICY_FILE))
    retried = {"pool": "iceberg_maint", "retries": 2, "retry_delay": timedelta(minutes=5)}
    if SHARDS <= 1:
        IcebergRemoveOrphanFilesOperator.partial(
            task_id="remove_orphan_files", map_index_template="{{ task.table }}", **retried
        ).expand_kwargs(plan.output)
    else:
        sharded_orphan_removal(
            shards=SHARDS, jobs=plan.output, finish_task_id="remove_orphan_files", task_arguments=retried
        )
