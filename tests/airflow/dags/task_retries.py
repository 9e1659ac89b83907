"""Test-only DAGs (the second DAG bundle of the test session): one task of each kind, with one
retry and no delay, for ``tests/airflow/test_task_retries.py``.

The test names the table, policy file, SQL state store and report base in
``$ICEBERG_MAINT_TEST_TABLE``, ``$ICEBERG_MAINT_TEST_POLICY_FILE``, ``$ICEBERG_MAINT_TEST_STATE_URL``
and ``$ICEBERG_MAINT_TEST_REPORTS`` (read at parse time).
"""

from __future__ import annotations

import os
from datetime import datetime, timedelta

from airflow.sdk import DAG

from airflow_iceberg_maint.airflow.operators.orphan_planning import IcebergOrphanPolicyExpansionOperator
from airflow_iceberg_maint.airflow.sensors.due import IcebergTableDueSensor

ONE_RETRY = {"retries": 1, "retry_delay": timedelta(0)}
TABLE = os.environ.get("ICEBERG_MAINT_TEST_TABLE", "demo.orders")
POLICY_FILE = os.environ.get("ICEBERG_MAINT_TEST_POLICY_FILE")
STATE_URL = os.environ.get("ICEBERG_MAINT_TEST_STATE_URL")

with DAG(dag_id="retry_operator", schedule=None, start_date=datetime(2026, 1, 1), default_args=ONE_RETRY):
    IcebergOrphanPolicyExpansionOperator(
        task_id="plan",
        policy_file=POLICY_FILE or "",
        state_url=STATE_URL,
        report_location=os.environ.get("ICEBERG_MAINT_TEST_REPORTS"),
    )

with DAG(dag_id="retry_sensor", schedule=None, start_date=datetime(2026, 1, 1), default_args=ONE_RETRY):
    IcebergTableDueSensor(task_id="wait", table=TABLE, state_url=STATE_URL, poke_interval=0.2, timeout=60)

with DAG(dag_id="retry_deferred_sensor", schedule=None, start_date=datetime(2026, 1, 1), default_args=ONE_RETRY):
    IcebergTableDueSensor(
        task_id="wait",
        table=TABLE,
        policy_file=POLICY_FILE,
        state_url=STATE_URL,
        deferrable=True,
        poke_interval=0.2,
        timeout=120,
    )
