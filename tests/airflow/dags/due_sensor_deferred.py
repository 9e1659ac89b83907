"""Test-only DAG (a second DAG bundle of the test session): the due sensor in deferrable mode."""

from __future__ import annotations

from datetime import datetime
from pathlib import Path

from airflow.sdk import DAG

from airflow_iceberg_maint.airflow.sensors.due import IcebergTableDueSensor

POLICY_FILE = Path(__file__).resolve().parents[3] / "dags" / "iceberg_maint_policies.yaml"

with DAG(dag_id="due_sensor_deferred", schedule=None, start_date=datetime(2026, 1, 1)):
    IcebergTableDueSensor(
        task_id="wait_until_due",
        table="demo.orders",
        policy_file=str(POLICY_FILE),
        deferrable=True,
        poke_interval=0.2,
        timeout=120,
    )
