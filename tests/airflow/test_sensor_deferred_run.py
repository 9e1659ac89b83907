"""The deferrable sensor in a DAG run: it defers, its trigger polls the state kept in Airflow
Variables, and the task resumes once the table becomes due."""

from __future__ import annotations

import json
import threading
import time
from datetime import UTC, datetime, timedelta

from airflow.dag_processing.dagbag import DagBag
from pyiceberg.catalog.sql import SqlCatalog

from airflow_iceberg_maint.airflow.state_store import variable_key
from airflow_iceberg_maint.state import CleanupState
from tests.airflow.conftest import TEST_DAGS
from tests.airflow.helpers import task_states, xcom


def set_state(table_uuid: str, days_ago: float) -> None:
    """Write the state as the removal task would, straight into the metadata database."""
    from airflow.models.variable import Variable

    at = datetime.now(UTC) - timedelta(days=days_ago)
    state = CleanupState(table_uuid, "system_iceberg_orphan_file_removal", "demo.orders", at, at, "success", False)
    Variable.set(variable_key(table_uuid), json.dumps(state.to_json()))


def test_deferred_sensor_resumes_when_the_table_becomes_due(demo_tables: dict, catalog: SqlCatalog) -> None:
    table_uuid = str(catalog.load_table("demo.orders").metadata.table_uuid)
    set_state(table_uuid, days_ago=1)
    dag = DagBag(dag_folder=str(TEST_DAGS)).dags["due_sensor_deferred"]
    seen_deferred = threading.Event()

    def make_due_once_deferred() -> None:
        """The table becomes due only after the sensor has deferred and its trigger polls."""
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and not seen_deferred.is_set():
            if "deferred" in task_states("due_sensor_deferred", "%").values():
                seen_deferred.set()
                set_state(table_uuid, days_ago=8)
            time.sleep(0.2)

    watcher = threading.Thread(target=make_due_once_deferred, daemon=True)
    watcher.start()
    run = dag.test()
    watcher.join(timeout=1)
    assert seen_deferred.is_set()
    assert run.state == "success"
    assert task_states("due_sensor_deferred", run.run_id) == {("wait_until_due", -1): "success"}
    evaluation = xcom("due_sensor_deferred", run.run_id, "wait_until_due")
    assert evaluation["due"] is True
    assert evaluation["reason"] == "last cleaned 8 days ago, interval 7 days: due"
