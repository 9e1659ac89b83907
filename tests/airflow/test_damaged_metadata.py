"""A damaged current metadata file fails the task at once, with the one-line error and no retry (S2, S7)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from airflow.sdk import Context
from airflow.sdk.exceptions import AirflowFailException
from pyiceberg.catalog.sql import SqlCatalog

from airflow_iceberg_maint.airflow.operators.expiry import IcebergExpireSnapshotsOperator
from tests.support.airflow_dags import remover

TABLE = "demo.orders"


def _truncated(original: bytes) -> bytes:
    return original[: len(original) // 3]


def _no_snapshots(original: bytes) -> bytes:
    body = json.loads(original)
    del body["snapshots"]  # pyiceberg alone would read a table with no snapshots: every file unreferenced
    return json.dumps(body).encode()


@pytest.mark.parametrize("damage", [_truncated, _no_snapshots], ids=["truncated", "no snapshots"])
@pytest.mark.parametrize("task", ["orphans", "orphans dry run", "expiry", "expiry dry run"])
def test_a_damaged_metadata_file_fails_the_task_without_retry_and_deletes_nothing(
    demo_tables: dict, catalog: SqlCatalog, state_url: str, tmp_path: Path, context: Context, task: str, damage: Any
) -> None:
    current = Path(catalog.load_table(TABLE).metadata_location.removeprefix("file://"))
    current.write_bytes(damage(current.read_bytes()))
    dry_run = task.endswith("dry run")
    operator = (
        remover(state_url, tmp_path, table=TABLE, dry_run=dry_run)
        if task.startswith("orphans")
        else IcebergExpireSnapshotsOperator(
            task_id="expire",
            table=TABLE,
            older_than_days=0,
            retain_last=1,
            dry_run=dry_run,
            state_url=state_url,
            report_location=f"file://{tmp_path}/reports",
        )
    )
    data = Path(demo_tables[TABLE]["old"]).parent
    before = sorted(data.iterdir())
    with pytest.raises(AirflowFailException) as failed:
        operator.execute(context)
    message = str(failed.value)
    assert f"table '{TABLE}': its metadata file file://{current}" in message and "nothing was done" in message
    assert "\n" not in message
    assert sorted(data.iterdir()) == before
