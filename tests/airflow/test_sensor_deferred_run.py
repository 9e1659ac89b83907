"""The deferrable sensor in a DAG run: it defers while the table is not due, its trigger
polls, and the task resumes once the minimum interval has passed."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

import pytest
from airflow.dag_processing.dagbag import DagBag
from pyiceberg.catalog.sql import SqlCatalog

from airflow_iceberg_maint.state.cleanup import SqlStateStore, record_attempt
from tests.airflow.helpers import task_states, xcom
from tests.support.airflow_dags import TEST_DAGS

INTERVAL_SECONDS = 30  # longer than the first task start of a fresh process, so the sensor defers


def test_deferred_sensor_resumes_when_the_table_becomes_due(
    demo_tables: dict,
    catalog: SqlCatalog,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capfd: pytest.CaptureFixture[str],
) -> None:
    policy_file = tmp_path / "policy.json"
    policy_file.write_text(
        json.dumps(
            {
                "name": "every_30_seconds",
                "type": "system_iceberg_orphan_file_removal",
                "minIntervalDays": INTERVAL_SECONDS / 86_400,
                "tables": ["demo.orders"],
            }
        )
    )
    state_url = f"sqlite:///{tmp_path}/state.db"
    monkeypatch.setenv("ICEBERG_MAINT_TEST_POLICY_FILE", str(policy_file))
    monkeypatch.setenv("ICEBERG_MAINT_TEST_STATE_URL", state_url)
    table_uuid = str(catalog.load_table("demo.orders").metadata.table_uuid)
    record_attempt(
        SqlStateStore(state_url),
        table_uuid=table_uuid,
        table="demo.orders",
        at=datetime.now(UTC),
        dry_run=False,
        succeeded=True,
    )

    run = DagBag(dag_folder=str(TEST_DAGS)).dags["due_sensor_deferred"].test()

    output = capfd.readouterr().out
    assert "Pausing task as DEFERRED" in output
    assert "not due; next check in 0.2s" in output
    assert run.state == "success"
    assert task_states("due_sensor_deferred", run.run_id) == {("wait_until_due", -1): "success"}
    evaluation = xcom("due_sensor_deferred", run.run_id, "wait_until_due")
    assert evaluation["due"] is True and evaluation["policy"] == "every_30_seconds"
    assert evaluation["days_since_last_cleanup"] * 86_400 >= INTERVAL_SECONDS
