"""The due sensor on a table of pyiceberg's Glue catalog, through an ``iceberg`` connection to the
Glue API of the local server."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from airflow_iceberg_maint.airflow.sensors.due import IcebergTableDueSensor
from airflow_iceberg_maint.policy.state import SqlStateStore, record_attempt
from tests.conftest import glue_properties

pytestmark = pytest.mark.s3


def test_due_sensor_on_a_glue_table(
    glue_catalog: Any, s3_endpoint: str, s3_bucket: str, tmp_path: Path, context: dict, monkeypatch: pytest.MonkeyPatch
) -> None:
    namespace = glue_catalog.test_namespace
    table = glue_catalog.create_table(f"{namespace}.orders", pa.schema([("id", pa.int64())]))
    table.append(pa.table({"id": [1]}))
    monkeypatch.setenv(
        "AIRFLOW_CONN_GLUE_MAINT",
        json.dumps({"conn_type": "iceberg", "extra": glue_properties(s3_endpoint, s3_bucket)}),
    )
    policy_file = tmp_path / "policies.yaml"
    policy_file.write_text(
        f"name: weekly\ntype: system_iceberg_orphan_file_removal\nminIntervalDays: 7\ntables: ['{namespace}.*']\n"
    )
    state_url = f"sqlite:///{tmp_path}/state.db"

    def poke() -> Any:
        return IcebergTableDueSensor(
            task_id="due",
            table=f"{namespace}.orders",
            policy_file=str(policy_file),
            state_url=state_url,
            iceberg_conn_id="glue_maint",
        ).poke(context)

    first = poke()
    assert first.is_done is True and first.xcom_value["reason"] == "never cleaned: due"
    record_attempt(
        SqlStateStore(state_url),
        table_uuid=str(table.metadata.table_uuid),
        table=f"{namespace}.orders",
        at=datetime.now(UTC) - timedelta(days=2),
        dry_run=False,
        succeeded=True,
    )
    second = poke()
    assert second.is_done is False
    assert second.xcom_value["reason"] == "last cleaned 2 days ago, interval 7 days: not due"
