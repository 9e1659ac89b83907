"""The due sensor on a table of pyiceberg's Glue catalog, through an ``iceberg`` connection to the
Glue API of the local server."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from airflow.sdk import Context

from tests.airflow.helpers import check_due_sensor
from tests.support.services import glue_properties

pytestmark = pytest.mark.s3


def test_due_sensor_on_a_glue_table(
    glue_catalog: Any,
    s3_endpoint: str,
    s3_bucket: str,
    tmp_path: Path,
    context: Context,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    namespace = glue_catalog.test_namespace
    table = glue_catalog.create_table(f"{namespace}.orders", pa.schema([("id", pa.int64())]))
    table.append(pa.table({"id": [1]}))
    monkeypatch.setenv(
        "AIRFLOW_CONN_GLUE_MAINT",
        json.dumps({"conn_type": "iceberg", "extra": glue_properties(s3_endpoint, s3_bucket)}),
    )
    check_due_sensor("glue_maint", table, f"{namespace}.orders", tmp_path, context)
