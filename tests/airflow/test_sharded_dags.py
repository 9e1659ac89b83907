"""The orphan DAGs with ``shards`` above 1, end to end with ``dag.test()``: same outcome as one task."""

from __future__ import annotations

import json
from datetime import datetime
from pathlib import Path

import pytest
from airflow.dag_processing.dagbag import DagBag
from airflow.sdk import DAG
from pyiceberg.catalog.sql import SqlCatalog

from airflow_iceberg_maint.airflow.sharded_orphan_removal import sharded_orphan_removal
from tests.airflow.helpers import stored_state, task_states, xcom
from tests.support.airflow_dags import DAGS

SCHEDULED = "iceberg_orphan_cleanup_scheduled"
MANUAL = "iceberg_orphan_cleanup_manual"


def _dags() -> dict:
    bag = DagBag(dag_folder=str(DAGS))
    assert bag.import_errors == {}
    return bag.dags


def test_manual_dag_with_shards_previews_then_deletes_what_one_task_would(
    demo_tables: dict, catalog: SqlCatalog
) -> None:
    dag = _dags()[MANUAL]
    orders = demo_tables["demo.orders"]
    single = dag.test(run_conf={"table": "demo.orders"})
    one = xcom(MANUAL, single.run_id, "remove_orphan_files")

    preview = dag.test(run_conf={"table": "demo.orders", "shards": 3})
    assert preview.state == "success"
    states = task_states(MANUAL, preview.run_id)
    assert states[("remove_orphan_files", -1)] == "skipped"
    assert {k: v for k, v in states.items() if k[0] in ("scan_orphan_shard", "match_orphan_shard")} == {
        (task, i): "success" for task in ("scan_orphan_shard", "match_orphan_shard") for i in range(3)
    }
    sharded = xcom(MANUAL, preview.run_id, "finish_orphan_shards")
    for key in ("orphan_file_count", "orphan_bytes", "deleted_file_count", "files_listed", "dry_run"):
        assert sharded[key] == one[key]
    report = json.loads(Path(sharded["report"].removeprefix("file://")).read_text())
    assert report["orphan_files"] == [orders["old_uri"]] and orders["old"].exists()
    # A dry run's report has a dry run's name, sharded or not (S16: no real run writes over it).
    assert Path(sharded["report"]).name == Path(one["report"]).name == "demo.orders.dry-run.json"
    plan = xcom(MANUAL, preview.run_id, "plan_orphan_shards")
    assert plan["shards"] == 3 and not plan["scratch"].startswith(catalog.load_table("demo.orders").location())

    real = dag.test(run_conf={"table": "demo.orders", "shards": 2, "dry_run": False})
    assert real.state == "success"
    summary = xcom(MANUAL, real.run_id, "finish_orphan_shards")
    assert (summary["orphan_file_count"], summary["deleted_file_count"]) == (1, 1)
    assert Path(summary["report"]).name == "demo.orders.json"
    assert not orders["old"].exists() and orders["fresh"].exists()
    assert len(catalog.load_table("demo.orders").scan().to_arrow()) == 3
    assert stored_state(summary["table_uuid"])["last_success_at"] is not None


def test_a_failed_shard_fails_the_manual_run_and_deletes_nothing(demo_tables: dict, catalog: SqlCatalog) -> None:
    table = catalog.load_table("demo.orders")
    manifest = Path(table.inspect.manifests()["path"].to_pylist()[0].removeprefix("file://"))
    body = manifest.read_bytes()
    manifest.write_bytes(b"not avro")
    try:
        run = _dags()[MANUAL].test(run_conf={"table": "demo.orders", "shards": 2, "dry_run": False})
    finally:
        manifest.write_bytes(body)
    assert run.state == "failed"
    states = task_states(MANUAL, run.run_id)
    assert "failed" in {states[("scan_orphan_shard", i)] for i in range(2)}
    assert states[("finish_orphan_shards", -1)] == "upstream_failed"
    assert demo_tables["demo.orders"]["old"].exists()


def test_scheduled_dag_with_shards_cleans_each_due_table(
    demo_tables: dict, catalog: SqlCatalog, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ICEBERG_MAINT_ORPHAN_SHARDS", "2")
    run = _dags()[SCHEDULED].test()
    assert run.state == "success"
    states = task_states(SCHEDULED, run.run_id)
    assert {k for k, v in states.items() if v == "success"} == {
        ("plan_due_tables", -1),
        ("plan_orphan_shards", 0),
        ("plan_orphan_shards", 1),
        ("shard_items", -1),
        *((task, i) for task in ("scan_orphan_shard", "match_orphan_shard") for i in range(4)),
        ("remove_orphan_files", 0),
        ("remove_orphan_files", 1),
    }
    summaries = [xcom(SCHEDULED, run.run_id, "remove_orphan_files", map_index=i) for i in range(2)]
    assert {s["table"] for s in summaries} == {"demo.orders", "demo.events"}
    for summary in summaries:
        assert (summary["orphan_file_count"], summary["deleted_file_count"]) == (1, 1)
        assert summary["policy"] == "remove_orphans_weekly"
    for planted in demo_tables.values():
        assert not planted["old"].exists() and planted["fresh"].exists()


#: Each task's upstream tasks in the sharded DAGs as they were wired by hand, before the TaskGroup factory.
HAND_WIRED = {
    MANUAL: {
        "single_or_sharded": set(),
        "remove_orphan_files": {"single_or_sharded"},
        "plan_orphan_shards": {"single_or_sharded"},
        "shard_items": {"plan_orphan_shards"},
        "scan_orphan_shard": {"shard_items"},
        "match_orphan_shard": {"shard_items", "scan_orphan_shard"},
        "finish_orphan_shards": {"match_orphan_shard"},
    },
    SCHEDULED: {
        "plan_due_tables": set(),
        "plan_orphan_shards": {"plan_due_tables"},
        "shard_items": {"plan_orphan_shards"},
        "scan_orphan_shard": {"shard_items"},
        "match_orphan_shard": {"shard_items", "scan_orphan_shard"},
        "remove_orphan_files": {"plan_orphan_shards", "match_orphan_shard"},
    },
}


@pytest.mark.parametrize("dag_id", [MANUAL, SCHEDULED])
def test_the_sharded_scan_task_group_wires_the_tasks_the_hand_wired_dags_had(
    dag_id: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ICEBERG_MAINT_ORPHAN_SHARDS", "2")
    dag = _dags()[dag_id]
    assert {t.task_id: set(t.upstream_task_ids) for t in dag.tasks} == HAND_WIRED[dag_id]
    group = dag.task_group_dict["sharded_orphan_removal"]
    finish = "finish_orphan_shards" if dag_id == MANUAL else "remove_orphan_files"
    assert set(group.children) == {
        "plan_orphan_shards",
        "shard_items",
        "scan_orphan_shard",
        "match_orphan_shard",
        finish,
    }
    retried = dag_id == SCHEDULED  # the scheduled DAG's task_arguments reach every task but the items
    for task_id in ("plan_orphan_shards", "scan_orphan_shard", "match_orphan_shard", finish):
        assert (dag.get_task(task_id).retries, dag.get_task(task_id).pool) == (
            (2, "iceberg_maint") if retried else (0, "default_pool")
        )


def test_the_sharded_scan_task_group_refuses_jobs_and_one_table_at_once() -> None:
    with DAG(dag_id="sharded_arguments", schedule=None, start_date=datetime(2026, 1, 1)):
        with pytest.raises(ValueError, match="give jobs or one table's arguments, not both"):
            sharded_orphan_removal(shards=2, jobs=[{"table": "demo.orders"}], table="demo.orders")
        with pytest.raises(ValueError, match="expected jobs, or a table"):
            sharded_orphan_removal(shards=2, dry_run=True)
