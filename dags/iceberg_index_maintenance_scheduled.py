"""Scheduled index and orphan maintenance, for deployments without a triggerer.

Every 15 minutes, for every table of ``iceberg_indexes.yaml``: create missing indexes, check
the lag of each index against its threshold, commit extracts for the lagging ones, expire old
extracts, evaluate the orphan-removal policy (``iceberg_maint_policies.yaml``) and remove
orphans when it is due. The same tasks as ``iceberg_index_maintenance_event_triggered``; a run
with nothing to do only reads metadata.
"""

from __future__ import annotations

from datetime import datetime
from pathlib import Path

from airflow.sdk import DAG, CronTriggerTimetable

from airflow_iceberg_maint.airflow.index_maintenance import index_maintenance_tasks

DEFINITIONS = Path(__file__).with_name("iceberg_indexes.yaml")
POLICY_FILE = Path(__file__).with_name("iceberg_maint_policies.yaml")

with DAG(
    dag_id="iceberg_index_maintenance_scheduled",
    schedule=CronTriggerTimetable("*/15 * * * *", timezone="UTC"),
    start_date=datetime(2026, 1, 1),
    catchup=False,
    max_active_runs=1,
    tags=["iceberg", "maintenance", "index"],
    doc_md=__doc__,
):
    index_maintenance_tasks(str(DEFINITIONS), str(POLICY_FILE))
