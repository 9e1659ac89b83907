"""Test-only DAG (a second DAG bundle of the test session): the due sensor in deferrable mode.

The test names its policy file and SQL state store in ``$ICEBERG_MAINT_TEST_POLICY_FILE`` and
``$ICEBERG_MAINT_TEST_STATE_URL`` (read at parse time).
"""

from __future__ import annotations

import os
from datetime import datetime

from airflow.sdk import DAG

from airflow_iceberg_maint.airflow.sensors.due import IcebergTableDueSensor

with DAG(dag_id="due_sensor_deferred", schedule=None, start_date=datetime(2026, 1, 1)):
    IcebergTableDueSensor(
        task_id="wait_until_due",
        table="demo.orders",
        policy_file=os.environ.get("ICEBERG_MAINT_TEST_POLICY_FILE"),
        state_url=os.environ.get("ICEBERG_MAINT_TEST_STATE_URL"),
        deferrable=True,
        poke_interval=0.2,
        timeout=120,
    )
