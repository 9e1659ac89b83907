"""Both sample DAGs end to end with ``dag.test()`` on a real metadata database and SQLite catalog."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from airflow.dag_processing.dagbag import DagBag
from pyiceberg.catalog.sql import SqlCatalog

from tests.airflow.helpers import stored_state, task_states, xcom
from tests.support.airflow_dags import DAGS

SCHEDULED = "iceberg_orphan_cleanup_scheduled"
MANUAL = "iceberg_orphan_cleanup_manual"


@pytest.fixture(scope="module")
def dags() -> dict:
    bag = DagBag(dag_folder=str(DAGS))
    assert bag.import_errors == {}
    return bag.dags


def uuid_of(catalog: SqlCatalog, table: str) -> str:
    return str(catalog.load_table(table).metadata.table_uuid)


def mapped_summaries(run_id: str) -> dict[str, dict]:
    states = task_states(SCHEDULED, run_id)
    indexes = sorted(i for task, i in states if task == "remove_orphan_files")
    summaries = [xcom(SCHEDULED, run_id, "remove_orphan_files", map_index=i) for i in indexes]
    return {s["table"]: s for s in summaries}


def test_scheduled_dag_cleans_due_tables_then_skips_the_same_day(
    dags: dict, demo_tables: dict, catalog: SqlCatalog
) -> None:
    first = dags[SCHEDULED].test()
    assert first.state == "success"
    states = task_states(SCHEDULED, first.run_id)
    assert states == {
        ("plan_due_tables", -1): "success",
        ("remove_orphan_files", 0): "success",
        ("remove_orphan_files", 1): "success",
    }
    for planted in demo_tables.values():
        assert not planted["old"].exists() and planted["fresh"].exists()
    for name in demo_tables:
        assert len(catalog.load_table(name).scan().to_arrow()) == 3

    summaries = mapped_summaries(first.run_id)
    assert set(summaries) == {"demo.orders", "demo.events"}
    for name, summary in summaries.items():
        assert summary["table_uuid"] == uuid_of(catalog, name)
        assert summary["policy"] == "remove_orphans_weekly"
        assert (summary["orphan_file_count"], summary["deleted_file_count"], summary["failed_count"]) == (1, 1, 0)
        assert summary["dry_run"] is False
        report = json.loads(Path(summary["report"].removeprefix("file://")).read_text())
        assert report["orphan_files"] == [demo_tables[name]["old_uri"]]
        state = stored_state(summary["table_uuid"])
        assert state["last_success_at"] is not None and state["last_attempt_status"] == "success"
        assert state["last_attempt_counts"]["deleted_file_count"] == 1

    # A new orphan appears, but the same day neither table is due: nothing is mapped or deleted.
    late = demo_tables["demo.orders"]["old"]
    late.write_bytes(b"late")
    second = dags[SCHEDULED].test()
    assert second.state == "success"
    assert task_states(SCHEDULED, second.run_id) == {
        ("plan_due_tables", -1): "success",
        ("remove_orphan_files", -1): "skipped",
    }
    assert xcom(SCHEDULED, second.run_id, "plan_due_tables") == []
    evaluations = xcom(SCHEDULED, second.run_id, "plan_due_tables", key="evaluations")
    assert {e["table"]: e["due"] for e in evaluations} == {"demo.orders": False, "demo.events": False}
    assert all(e["reason"].endswith("interval 7 days: not due") for e in evaluations)
    assert late.exists()


def test_manual_dag_previews_by_default_then_cleans_and_shares_state(
    dags: dict, demo_tables: dict, catalog: SqlCatalog
) -> None:
    orders = demo_tables["demo.orders"]
    preview = dags[MANUAL].test(run_conf={"table": "demo.orders"})
    assert preview.state == "success"
    summary = xcom(MANUAL, preview.run_id, "remove_orphan_files")
    assert summary["dry_run"] is True
    assert (summary["orphan_file_count"], summary["deleted_file_count"]) == (1, 0)
    assert orders["old"].exists()
    state = stored_state(uuid_of(catalog, "demo.orders"))
    assert state["last_success_at"] is None and state["last_attempt_dry_run"] is True

    real = dags[MANUAL].test(run_conf={"table": "demo.orders", "dry_run": False, "older_than_days": 5})
    assert real.state == "success"
    summary = xcom(MANUAL, real.run_id, "remove_orphan_files")
    assert (summary["orphan_file_count"], summary["deleted_file_count"]) == (1, 1)
    assert not orders["old"].exists() and orders["fresh"].exists()
    assert stored_state(uuid_of(catalog, "demo.orders"))["last_success_at"] is not None

    # The scheduled DAG sees the manual cleanup: only the other table is due.
    scheduled = dags[SCHEDULED].test()
    assert set(mapped_summaries(scheduled.run_id)) == {"demo.events"}
    assert not demo_tables["demo.events"]["old"].exists()


def test_manual_dag_refuses_a_location_outside_the_table(dags: dict, demo_tables: dict) -> None:
    other = demo_tables["demo.events"]["old"].parent.parent
    run = dags[MANUAL].test(run_conf={"table": "demo.orders", "dry_run": False, "location": f"file://{other}"})
    assert run.state == "failed"
    assert {k: v for k, v in task_states(MANUAL, run.run_id).items() if v != "skipped"} == {
        ("single_or_sharded", -1): "success",
        ("remove_orphan_files", -1): "failed",
    }
    assert demo_tables["demo.events"]["old"].exists()
