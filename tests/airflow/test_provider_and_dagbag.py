"""The provider is discovered through its entry point, and the sample DAGs load cleanly."""

from __future__ import annotations

from airflow.dag_processing.dagbag import DagBag
from airflow.providers_manager import ProvidersManager

from tests.airflow.conftest import DAGS


def test_provider_is_discovered_with_its_modules() -> None:
    info = ProvidersManager().providers["airflow-iceberg-maint"]
    assert info.version == "0.1.0"
    modules = {m for entry in info.data["operators"] for m in entry["python-modules"]}
    assert {
        "airflow_iceberg_maint.airflow.operators.orphans",
        "airflow_iceberg_maint.airflow.operators.orphan_planning",
    } <= modules
    sensors = {m for entry in info.data["sensors"] for m in entry["python-modules"]}
    triggers = {m for entry in info.data["triggers"] for m in entry["python-modules"]}
    assert "airflow_iceberg_maint.airflow.sensors.due" in sensors
    assert "airflow_iceberg_maint.airflow.triggers.due" in triggers
    for section in ("operators", "sensors", "triggers"):
        for entry in info.data[section]:
            for module in entry["python-modules"]:
                __import__(module)


def test_dagbag_has_no_import_errors() -> None:
    bag = DagBag(dag_folder=str(DAGS))
    assert bag.import_errors == {}
    assert {"iceberg_orphan_cleanup_scheduled", "iceberg_orphan_cleanup_manual"} <= set(bag.dag_ids)


def test_scheduled_dag_maps_removal_in_the_pool() -> None:
    dag = DagBag(dag_folder=str(DAGS)).get_dag("iceberg_orphan_cleanup_scheduled")
    assert dag.timetable.expression == "0 0 * * *"
    removal = dag.get_task("remove_orphan_files")
    assert removal.pool == "iceberg_maint"
    assert dag.get_task("plan_due_tables").downstream_task_ids == {"remove_orphan_files"}


def test_manual_dag_form() -> None:
    dag = DagBag(dag_folder=str(DAGS)).get_dag("iceberg_orphan_cleanup_manual")
    assert dag.schedule is None
    params = dag.params
    assert set(params.keys()) == {
        "table",
        "older_than_days",
        "allow_recent_files",
        "location",
        "only_this_table",
        "dry_run",
        "shards",
    }
    assert params["dry_run"] is True
    assert params["only_this_table"] is False
    assert params["allow_recent_files"] is False
    assert params["older_than_days"] == 3
    assert params["location"] is None
    assert params.get_param("table").schema["type"] == "string"
