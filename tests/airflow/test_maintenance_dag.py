"""``iceberg_table_maintenance_scheduled`` end to end with ``dag.test()``: per table, compact (off in the sample
policies: skipped), expire, then remove orphans."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from airflow.dag_processing.dagbag import DagBag
from pyiceberg.catalog.sql import SqlCatalog

from airflow_iceberg_maint.expiry.settings import MAX_SNAPSHOT_AGE
from tests.airflow.helpers import task_states, xcom
from tests.support.airflow_dags import DAGS

DAG_ID = "iceberg_table_maintenance_scheduled"
EXPIRE = "maintain_table.expire_snapshots"
REMOVE = "maintain_table.remove_orphan_files"
DATA_FILES = "maintain_table.rewrite_data_files"
MANIFESTS = "maintain_table.rewrite_manifests"
RUN_HISTORIES = ("iceberg_maint.runs.demo.orders", "iceberg_maint.runs.demo.events")


@pytest.fixture(scope="module")
def dag():
    bag = DagBag(dag_folder=str(DAGS))
    assert bag.import_errors == {}
    return bag.dags[DAG_ID]


def variable(key: str) -> dict | None:
    from airflow.models.variable import Variable
    from airflow.utils.session import create_session

    with create_session() as session:
        row = session.query(Variable).filter_by(key=key).one_or_none()
        return None if row is None else json.loads(row.val)


@pytest.fixture
def no_run_history() -> None:
    """The metadata database is the session's: forget the runs earlier tests recorded for these tables."""
    from airflow.models.variable import Variable
    from airflow.utils.session import create_session

    with create_session() as session:
        session.query(Variable).filter(Variable.key.in_(RUN_HISTORIES)).delete(synchronize_session=False)


def test_each_table_is_expired_then_cleaned_and_a_failed_expiry_stops_its_orphan_scan(
    dag, demo_tables: dict, catalog: SqlCatalog, no_run_history: None
) -> None:
    orders = catalog.load_table("demo.orders")
    first, head = (s.snapshot_id for s in orders.metadata.snapshots)
    first_list = orders.snapshot_by_id(first).manifest_list
    with orders.transaction() as tx:  # every snapshot but main's head is past its age
        tx.set_properties({MAX_SNAPSHOT_AGE: "0"})
    with catalog.load_table("demo.events").transaction() as tx:  # expiry is refused: it fails the table
        tx.set_properties({"gc.enabled": "false"})

    run = dag.test()

    assert run.state == "failed"  # one table failed; the other was maintained
    # Both never maintained: equal scores, so the items are in name order.
    assert task_states(DAG_ID, run.run_id) == {
        ("plan_due_tables", -1): "success",
        # The sample's compaction policy is disabled: no table is due for it, and expiry runs after the skips.
        (DATA_FILES, 0): "skipped",
        (DATA_FILES, 1): "skipped",
        (MANIFESTS, 0): "skipped",
        (MANIFESTS, 1): "skipped",
        (EXPIRE, 0): "failed",
        (REMOVE, 0): "upstream_failed",
        (EXPIRE, 1): "success",
        (REMOVE, 1): "success",
    }
    assert demo_tables["demo.events"]["old"].exists()  # never scanned
    assert not demo_tables["demo.orders"]["old"].exists() and demo_tables["demo.orders"]["fresh"].exists()

    expired = xcom(DAG_ID, run.run_id, EXPIRE, map_index=1)
    assert (expired["table"], expired["policy"], expired["expired_snapshot_count"]) == (
        "demo.orders",
        "expire_snapshots_daily",
        1,
    )
    assert expired["deleted_file_count"] == 1 and not Path(first_list.removeprefix("file://")).exists()
    after = catalog.load_table("demo.orders")
    assert [s.snapshot_id for s in after.metadata.snapshots] == [head]
    assert after.scan().to_arrow().num_rows == 3
    removed = xcom(DAG_ID, run.run_id, REMOVE, map_index=1)
    assert (removed["policy"], removed["deleted_file_count"]) == ("remove_orphans_weekly", 1)

    runs = variable(RUN_HISTORIES[0])
    assert runs is not None and [r["kind"] for r in runs["runs"]] == ["expiry", "orphans"]
    record = runs["runs"][0]
    assert record["status"] == "success" and record["counts"]["expired_snapshot_count"] == 1
    assert record["counts"]["deleted_bytes"] == expired["deleted_bytes"] > 0
    events = variable(RUN_HISTORIES[1])
    assert events is not None and [r["kind"] for r in events["runs"]] == ["expiry"]
    failed = events["runs"][0]
    assert failed["status"] == "failed" and "gc.enabled=false" in failed["error"]

    # The same day nothing is due for expiry (1-day interval) or orphan removal (7 days): nothing runs.
    catalog.load_table("demo.events").transaction().set_properties({"gc.enabled": "true"}).commit_transaction()
    again = dag.test()
    states = task_states(DAG_ID, again.run_id)
    assert states[("plan_due_tables", -1)] == "success"
    items = xcom(DAG_ID, again.run_id, "plan_due_tables")
    # demo.events: its expiry failed (no success recorded) and it was never cleaned: due for both.
    assert [(i["table"], i["expire"], i["remove_orphans"]) for i in items] == [("demo.events", True, True)]
    assert again.state == "success"
    assert not demo_tables["demo.events"]["old"].exists()
