"""Test-only DAG: ``db.parts``'s data rewrite in three shares (``compaction_task_group``). The state store and
the reports' base are ``$ICEBERG_MAINT_TEST_STATE_URL`` and ``$ICEBERG_MAINT_TEST_REPORTS`` (read at parse time)."""

from __future__ import annotations

import os
from datetime import datetime

from airflow.sdk import DAG

from airflow_iceberg_maint.airflow.compaction_task_group import compaction_task_group

with DAG(dag_id="sharded_compaction", schedule=None, start_date=datetime(2026, 1, 1), catchup=False):
    compaction_task_group(
        table="db.parts",
        shares=3,
        state_url=os.environ.get("ICEBERG_MAINT_TEST_STATE_URL"),
        report_location=os.environ.get("ICEBERG_MAINT_TEST_REPORTS"),
    )
