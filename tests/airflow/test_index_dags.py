"""The index maintenance sample DAGs load cleanly and are wired as documented."""

from __future__ import annotations

from airflow.dag_processing.dagbag import DagBag
from airflow.providers.apache.iceberg.triggers.iceberg import IcebergTableSnapshotTrigger
from airflow.sdk.definitions.asset import AssetNameRef

from airflow_iceberg_maint.airflow.triggers.index_events import IcebergIndexLagEventTrigger
from tests.support.airflow_dags import DAGS

EVENT = "iceberg_index_maintenance_event_triggered"
SCHEDULED = "iceberg_index_maintenance_scheduled"
WRITER = "iceberg_demo_writer"
TASKS = {
    "tables_to_maintain",
    "create_missing_indexes",
    "check_index_lag",
    "commit_index_extract",
    "indexes_to_shard",
    "plan_index_shards",
    "build_index_shard",
    "sharded_builds_to_commit",
    "commit_sharded_extract",
    "indexes_to_expire",
    "expire_index_extracts",
    "evaluate_orphan_removal",
    "remove_orphan_files",
}


def test_new_dags_import_without_errors() -> None:
    bag = DagBag(dag_folder=str(DAGS))
    assert bag.import_errors == {}
    assert {EVENT, SCHEDULED, WRITER} <= set(bag.dag_ids)


def test_event_dag_is_scheduled_on_watched_table_assets() -> None:
    bag = DagBag(dag_folder=str(DAGS))
    dag = bag.get_dag(EVENT)
    assets = list(dag.timetable.asset_condition.objects)
    assert [(a.name, a.uri) for a in assets] == [
        ("iceberg_default.demo.events", "iceberg://iceberg_default/demo/events")
    ]
    assert [w.name for w in assets[0].watchers] == [
        "demo.events.events_by_id.lag",
        "demo.events.events_by_kind.lag",
        "demo.events.snapshots",
    ]
    triggers = [w.trigger for w in assets[0].watchers]
    lag = [t for t in triggers if isinstance(t, IcebergIndexLagEventTrigger)]
    assert sorted((t.indexes, t.max_snapshots_behind, t.max_added_files) for t in lag) == [
        (["events_by_id"], 0, None),
        (["events_by_kind"], 2, 10),
    ]
    assert [type(t) for t in triggers if not isinstance(t, IcebergIndexLagEventTrigger)] == [
        IcebergTableSnapshotTrigger
    ]
    assert set(dag.task_ids) == TASKS
    # The writer references the asset by name instead of redefining it without the watchers.
    writer_outlets = bag.get_dag(WRITER).get_task("append_rows").outlets
    assert writer_outlets == [AssetNameRef(assets[0].name)]


def test_scheduled_dag_runs_the_same_tasks_on_a_timetable() -> None:
    dag = DagBag(dag_folder=str(DAGS)).get_dag(SCHEDULED)
    assert dag.timetable.expression == "*/15 * * * *"
    assert set(dag.task_ids) == TASKS
    assert dag.get_task("commit_index_extract").pool == "iceberg_maint"
    assert dag.get_task("expire_index_extracts").trigger_rule == "none_failed"


def test_provider_lists_the_index_modules() -> None:
    from airflow.providers_manager import ProvidersManager

    info = ProvidersManager().providers["airflow-iceberg-maint"].data
    listed = {
        section: {m for entry in info[section] for m in entry["python-modules"]}
        for section in ("operators", "sensors", "triggers")
    }
    assert {
        "airflow_iceberg_maint.airflow.operators.index",
        "airflow_iceberg_maint.airflow.operators.index_shards",
        "airflow_iceberg_maint.airflow.operators.orphan_planning",
    } <= listed["operators"]
    assert "airflow_iceberg_maint.airflow.sensors.index_lag" in listed["sensors"]
    assert {
        "airflow_iceberg_maint.airflow.triggers.index_lag",
        "airflow_iceberg_maint.airflow.triggers.index_events",
    } <= listed["triggers"]
